"""Reading and writing genome YAML safely.

Documents are parsed with `yaml.safe_load` only, after an event-level pre-scan that
refuses what a genome never needs and an attacker would use: anchors and aliases (alias
bombs expand exponentially when walked), tags (`!!python/...`), nesting deeper than a
genome has, oversized input and binary junk. The scan is linear in the input size, so
every refusal is fast.
"""

from __future__ import annotations

from typing import Any

import yaml

from dogma_evolve.genome.errors import GenomeError

MAX_BYTES = 1 << 20  # a 1000-layer genome is ~100 KB
MAX_DEPTH = 16  # genome documents nest 5 deep
MAX_EVENTS = 200_000
_STANDARD_TAGS = {
    None,
    "!",
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


def _prescan(text: str) -> None:
    depth = 0
    for n, event in enumerate(yaml.parse(text, Loader=yaml.SafeLoader)):
        if n > MAX_EVENTS:
            raise GenomeError("document too large: too many YAML nodes")
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise GenomeError("YAML anchors and aliases are not allowed in a genome")
        tag = getattr(event, "tag", None)
        if tag not in _STANDARD_TAGS:
            raise GenomeError(f"YAML tag {tag!s:.60} is not allowed in a genome")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise GenomeError(f"document nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def load_yaml(text: str | bytes) -> Any:
    """Parse one YAML document into plain Python data, or raise GenomeError (one line)."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise GenomeError(f"file too large ({len(text)} bytes; a genome is under 1 MiB)")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GenomeError(f"not a text file (invalid UTF-8 at byte {e.start})") from None
    if len(text) > MAX_BYTES:
        raise GenomeError(f"document too large ({len(text)} characters)")
    if "\x00" in text:
        raise GenomeError("not a text file (contains NUL bytes)")
    try:
        _prescan(text)
        return yaml.safe_load(text)
    except GenomeError:
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise GenomeError(f"invalid YAML{where}: {problem}") from None
    except RecursionError:
        raise GenomeError("document nests too deeply") from None
    except ValueError as e:  # e.g. an integer literal of thousands of digits
        raise GenomeError(f"invalid YAML value: {str(e).split(';')[0]}") from None


class _NoAliasPythonDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


# libyaml's emitter writes the same bytes as PyYAML's own for every document a genome makes
# (tests/genome/test_yaml_emitters.py) at about a fifth of the time; a genome's id hashes
# this text, so a driver spent seconds a generation here. PyYAML built without libyaml
# falls back to its Python emitter.
if getattr(yaml, "__with_libyaml__", False):

    class _NoAliasDumper(yaml.CSafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

else:  # pragma: no cover - PyYAML built without libyaml
    _NoAliasDumper = _NoAliasPythonDumper  # type: ignore[misc,assignment]


def dump_yaml(doc: dict[str, Any], *, emitter: str = "fast") -> str:
    """Canonical YAML: sorted keys, block style, no aliases. ``emitter="python"`` writes it
    with PyYAML's own emitter (the reference the fast one is checked against)."""
    dumper = _NoAliasPythonDumper if emitter == "python" else _NoAliasDumper
    return yaml.dump(
        doc, Dumper=dumper, sort_keys=True, default_flow_style=False, allow_unicode=False, width=1000
    )
