"""A user's own block kinds: a module that registers gene kinds and their blocks.

**The plugin contract.** A plugin is an importable module (or an installed entry point of
the group ``dogma_evolve.kinds`` naming one) that, on import, registers one or more kinds
through the same two steps a built-in kind takes: ``genome.register_kind(KindSpec(...,
role=...))`` (its schema, defaults, sanity bounds, derivation and role, torch-free) and a
``class FooConfig(BlockConfig, kind="foo", role=...)`` whose ``build()`` returns a
``Mixer`` (``forward``, ``init_state``, ``step``, ``state_size``) and which accounts its
params, FLOPs and state (`phenotype.blocks.base`). The kinds register after the built-ins
(``import genome`` registers those first), so they never move a built-in kind's place in
the draw order (`genome.kinds.drawable`).

**Loading** (:func:`load`): the module is imported (`genome.plugins.import_module`: from
the current directory too), its kinds are the blocks whose config class is defined in it
(or in its package), and each must have a gene that states the block's role (a built-in's
name is refused by `register_kind` as the module registers it). Its code is fingerprinted
(`genome.plugins.code_fingerprint`) and its text made canonical, ``MODULE#FINGERPRINT``; a
text pinned to another fingerprint is refused. Every failure is one
:class:`~genome.plugins.PluginError` line.

**The record** (:func:`record_of`) is what a run stores (``RunConfig.plugin_code``): the
module, fingerprint, where the code lay, its distribution's version, and per kind its role
and gene spec as data, so a command that only reads a store registers a stand-in gene
(`genome.kinds.register_recorded`) and shows stored genomes without importing the code.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from typing import Any

from dogma_evolve.genome import plugins
from dogma_evolve.genome.plugins import PluginError  # every refusal here: one line (a ValueError)
from dogma_evolve.genome.schema import KINDS
from dogma_evolve.phenotype.blocks.base import REGISTRY

ENTRY_POINT_GROUP = "dogma_evolve.kinds"
_PINNED = re.compile(rf"^(?P<module>[A-Za-z_][\w.]*)#(?P<digest>[0-9a-f]{{{plugins.FINGERPRINT_CHARS}}})$")
_loaded: dict[str, dict[str, Any]] = {}  # module -> its record, at first load in this process


def split_pinned(text: str) -> tuple[str, str | None]:
    """``MODULE#FINGERPRINT`` -> (module, fingerprint); ``MODULE`` or ``NAME`` -> (it, None)."""
    match = _PINNED.match(text.strip())
    if match:
        return match["module"], match["digest"]
    if "#" in text:
        raise PluginError(f"plugin {text!r}: a pinned plugin is MODULE#<16 hex digits>")
    return text.strip(), None


def resolve(name: str) -> str:
    """The module a plugin text names: an entry point ``name`` of ``dogma_evolve.kinds``
    (its value ``MODULE`` or ``MODULE:ATTR``) when one is installed, else ``name`` itself."""
    target = plugins.entry_point(ENTRY_POINT_GROUP, name)
    module = (target or name).partition(":")[0]
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise PluginError(f"plugin {name!r} is not a module path (a.b.c) nor an installed entry point")
    return module


def kinds_of(module: str) -> list[str]:
    """The kinds whose block config class is defined in ``module`` or below it, in
    registration order."""
    return [
        kind
        for kind, spec in REGISTRY.items()
        if spec.config.__module__ == module or spec.config.__module__.startswith(module + ".")
    ]


def load(text: str) -> dict[str, Any]:
    """Import the plugin ``text`` (``MODULE``, ``MODULE#FINGERPRINT`` or an entry-point name)
    and check it (see the module docstring); its record, with ``pinned`` its canonical text.
    A second load of one module in a process returns the first record (its code is what
    this process runs)."""
    name, expected = split_pinned(text)
    module = resolve(name)
    if module not in _loaded:
        genes_before = set(KINDS)
        plugins.import_module(module)
        kinds = kinds_of(module)
        orphans = [k for k in KINDS if k not in genes_before and k not in REGISTRY]
        if orphans:
            raise PluginError(
                f"plugin {module}: gene kind {orphans[0]!r} has no block (BlockConfig, kind=...)"
            )
        if not kinds:
            raise PluginError(
                f"plugin {module}: registers no block kind (class FooConfig(BlockConfig, kind=..., role=...))"
            )
        for kind in kinds:
            _check_kind(module, kind)
        fingerprint = plugins.code_fingerprint(module)
        _loaded[module] = record_of(module, kinds, fingerprint)
    record = _loaded[module]
    if expected is not None and expected != record["fingerprint"]:
        raise PluginError(
            f"plugin {module}: its code has fingerprint {record['fingerprint']}, not {expected}"
            f" (the code at {record['code']} changed)"
        )
    return record


def _check_kind(module: str, kind: str) -> None:
    """A plugin's gene states its block's role (a built-in's name cannot reach here:
    `register_kind` refuses a second registration of it)."""
    spec, block = KINDS[kind], REGISTRY[kind]
    if spec.role is None:
        raise PluginError(
            f"plugin {module}: gene kind {kind!r} states no role (KindSpec(..., role={block.role!r}))"
        )


def record_of(module: str, kinds: list[str], fingerprint: plugins.CodeFingerprint) -> dict[str, Any]:
    """The stored record of a loaded plugin (JSON-ready): see the module docstring."""
    genes = {}
    for kind in kinds:
        spec = KINDS[kind]
        genes[kind] = {
            "role": spec.role,
            "family": spec.family,
            "bases": list(spec.bases),
            "regions": list(spec.regions),
            "doc": spec.doc,
            "params": {name: {**asdict(p), "choices": list(p.choices)} for name, p in spec.params.items()},
        }
    return {
        "pinned": f"{module}#{fingerprint.digest}",
        "module": module,
        "fingerprint": fingerprint.digest,
        "code": fingerprint.root,
        "version": fingerprint.version,
        "kinds": list(kinds),
        "genes": genes,
    }


def pin(
    texts: tuple[str, ...], recorded: dict[str, dict[str, Any]]
) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """A run's ``--plugin`` texts -> (their pinned texts, the records by pinned text): each
    text that ``recorded`` holds is kept without importing (a stored run read back), every
    other is loaded and its kinds held to the block contract (`phenotype.contract`). Two
    plugins registering one kind cannot both load (`register_kind`)."""
    pinned, records = [], {}
    for text in texts:
        if text in recorded:
            pinned.append(text)
            records[text] = dict(recorded[text])
            continue
        record = load(text)
        _check_contract(record)
        pinned.append(record["pinned"])
        records[record["pinned"]] = record
    if len(set(pinned)) != len(pinned):
        raise PluginError("a plugin is named twice")
    return tuple(pinned), records


def _check_contract(record: dict[str, Any]) -> None:
    """Refuse a plugin whose kinds fail the block contract (`phenotype.contract`), naming
    the failed checks, before a run trains a block that, say, reads future tokens."""
    from dogma_evolve.phenotype.contract import check_kind

    for kind in record["kinds"]:
        failures = check_kind(kind)
        if failures:
            named = "; ".join(str(f) for f in failures)
            raise PluginError(
                f"plugin {record['module']}: kind {kind} fails the block contract: {named}"
                f" (evolve plugin check {record['module']})"
            )


def import_pinned(texts: tuple[str, ...] | list[str]) -> None:
    """Load each pinned plugin (a worker before it decodes, a command that runs a stored
    run's code): a missing module or other code is a ``PluginError``."""
    for text in texts:
        load(text)


def used_by(texts: tuple[str, ...] | list[str], genome_yaml: str) -> list[str]:
    """The pinned plugins among ``texts`` (loaded) whose kinds the genome holds: what its
    evaluation records (``metrics["plugins"]``), so that a result is reused only by a run
    pinned to the same code (`evolution.evaluating`)."""
    from dogma_evolve.genome import Genome

    try:
        kinds = {b.gene.kind for r in Genome.from_yaml(genome_yaml).regions for b in r.bases}
    except ValueError:  # not a valid genome: building it says so (the result is `invalid`)
        return []
    return [t for t in texts if kinds & set(load(t)["kinds"])]


def pinned_loaded() -> tuple[str, ...]:
    """The pinned texts of the plugins loaded in this process, in load order: what a
    command that trains outside a search (`ablate`, `scale`, `calibrate`) sends its workers."""
    return tuple(record["pinned"] for module, record in _loaded.items() if module in sys.modules)


__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "import_pinned",
    "kinds_of",
    "load",
    "pinned_loaded",
    "pin",
    "record_of",
    "resolve",
    "split_pinned",
    "used_by",
]
