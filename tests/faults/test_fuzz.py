"""Property-based fuzzing of everything that reads untrusted input.

* Genome documents made by mutating valid genomes (keys and values inserted, deleted or
  replaced with junk of every type) and arbitrary bytes or text: `evolve genome validate`
  answers 0 or 2, never raises, says why in one line, and a genome it accepts round-trips.
* Commands that read a file or an id (`genome show`, `audit`, `export --id`, `replay`)
  answer bad input with exit 2 and one line.
* No code path unpickles data from outside: `torch.load` only with ``weights_only=True``,
  no `pickle.load(s)`, and the NAS-Bench-201 table reader refuses every class.

`main` runs in-process; its output is captured with redirect_stdout/stderr, since
pytest's function-scoped capture fixtures do not reset between hypothesis examples. Its
check of the installation (`evolution.cli.preflight`, tested in tests/test_namespace.py),
the same for every input and most of a call's cost, runs once for the module (`_preflight_once`).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import os
import pickle
import pickletools
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dogma_evolve.evolution.cli.main import main
from dogma_evolve.genome import EDGE_KINDS, KINDS, PRESETS, REGION_TYPES, Genome
from dogma_evolve.genome.schema import PROMOTER, STRUCTURAL

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


# -- seed documents ------------------------------------------------------------------------
def _seed_documents() -> list[dict[str, Any]]:
    """Every preset plus a few small random genomes of the search's own making."""
    from dogma_evolve.evolution.spaces.dogma.seeds import random_genome

    docs = [Genome.from_dict(make()).to_dict() for make in PRESETS.values()]
    rng = random.Random(0)
    docs += [random_genome(rng, {"vocab": 32, "max_len": 64}, 10**6).to_dict() for _ in range(4)]
    return docs


SEEDS = _seed_documents()

# Values that reach deeper checks when put in the right place: names the schema knows.
_NAMES = sorted(
    {
        *KINDS,
        *REGION_TYPES,
        *EDGE_KINDS,
        *STRUCTURAL,
        *PROMOTER,
        "A",
        "T",
        "C",
        "G",
        "s0",
        "c0",
        "r0",
        "p0",
        "dogma",
        "regions",
        "edges",
        "id",
        "type",
        "settings",
        "bases",
        "base",
        "kind",
        "params",
        "source",
        "target",
    }
    | {p for spec in KINDS.values() for p in spec.params}
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70000),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**64), 10**100, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(_NAMES),
)
JUNK = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(_NAMES) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
KEYS = st.one_of(
    st.sampled_from(_NAMES),
    st.text(max_size=8),
    st.integers(-5, 5),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
)


def _containers(node: Any) -> list[Any]:
    found = [node]
    children = node.values() if isinstance(node, dict) else node
    for child in children:
        if isinstance(child, dict | list):
            found += _containers(child)
    return found


def _mutate(data: st.DataObject, doc: Any) -> None:
    """One random insert, delete, replace or duplicate somewhere in ``doc`` (in place)."""
    node = data.draw(st.sampled_from(_containers(doc)), label="where")
    op = data.draw(st.sampled_from(("insert", "delete", "replace", "duplicate")), label="op")
    if isinstance(node, dict):
        keys = list(node)
        if op == "insert" or not keys:
            node[data.draw(KEYS, label="key")] = data.draw(JUNK, label="value")
            return
        key = data.draw(st.sampled_from(keys), label="key")
        if op == "delete":
            del node[key]
        elif op == "replace":
            node[key] = data.draw(JUNK, label="value")
        else:  # the same value under another key
            node[data.draw(KEYS, label="new key")] = copy.deepcopy(node[key])
        return
    if op == "insert" or not node:
        node.insert(data.draw(st.integers(0, len(node)), label="at"), data.draw(JUNK))
        return
    i = data.draw(st.integers(0, len(node) - 1), label="index")
    if op == "delete":
        del node[i]
    elif op == "replace":
        node[i] = data.draw(JUNK, label="value")
    else:
        node.insert(i, copy.deepcopy(node[i]))


@st.composite
def mutated_documents(draw: Any) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS), label="seed"))
    data = draw(st.data())
    for _ in range(draw(st.integers(1, 4), label="mutations")):
        _mutate(data, doc)
    return doc  # (a junk root is what the bytes and text tests send)


# -- running the command -------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def _preflight_once() -> Any:
    """`main` checks before every command that each module of ours is this installation's
    own file (`preflight.check`, a walk over the distribution's thousands of recorded files:
    some 70 % of a refused genome's call). Its answer depends on the installation, not on the
    input fuzzed here: it is computed once, really, and every call of the module gets it."""
    from dogma_evolve.evolution.cli import preflight

    answer = preflight.check()
    patch = pytest.MonkeyPatch()
    patch.setattr(preflight, "check", lambda: answer)
    yield
    patch.undo()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``evolve ARGV`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def assert_one_line_refusal(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("evolve: error: ") and err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _validate_file(path: Path, content: bytes) -> tuple[int, str, str]:
    path.write_bytes(content)
    code, out, err = run_cli(["genome", "validate", str(path)])
    assert code in (0, 2), (code, err)
    if code == 2:
        assert_one_line_refusal(code, err)
    else:
        assert err == "" and out.startswith("valid: ")
    return code, out, err


def _dump(doc: Any) -> bytes:
    # sort_keys=False: junk keys of mixed types do not sort, and order is not what we test.
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


# -- (a) mutated genomes -------------------------------------------------------------------
@FUZZ
@pytest.mark.slow  # 150 examples through the CLI: `make test` runs it, `make test-fast` not
@given(doc=mutated_documents())
def test_mutated_genomes_are_accepted_or_refused_in_one_line(doc, scratch):
    code, out, _ = _validate_file(scratch / "mutated.yaml", _dump(doc))
    if code == 0:
        genome = Genome.from_dict(doc)
        assert out.split()[1] == genome.id
        again = Genome.from_yaml(genome.to_yaml())
        assert again.id == genome.id
        assert again.to_yaml() == genome.to_yaml()


def test_the_mutations_reach_both_answers(scratch):
    """The generator is not all junk: some mutants stay valid, most do not."""
    from hypothesis import Phase, find

    # no shrinking, and no deadline: a wall-clock limit fails on a loaded machine, not on a bug
    quick = settings(max_examples=300, database=None, phases=[Phase.generate], deadline=None)
    valid = find(mutated_documents(), lambda d: _answers(scratch, d) == 0, settings=quick)
    invalid = find(mutated_documents(), lambda d: _answers(scratch, d) == 2, settings=quick)
    assert _answers(scratch, valid) == 0 and _answers(scratch, invalid) == 2


def _answers(scratch: Path, doc: Any) -> int:
    return _validate_file(scratch / "probe.yaml", _dump(doc))[0]


# -- (b) arbitrary bytes and text ----------------------------------------------------------
@FUZZ
@given(content=st.binary(max_size=2048))
def test_arbitrary_bytes_never_raise(content, scratch):
    _validate_file(scratch / "bytes.yaml", content)


@FUZZ
@given(content=st.text(max_size=512))
def test_arbitrary_text_never_raises(content, scratch):
    _validate_file(scratch / "text.yaml", content.encode("utf-8", "surrogatepass"))


@FUZZ
@given(
    lines=st.lists(
        st.sampled_from(
            [line for doc in SEEDS[:3] for line in _dump(doc).decode().splitlines()]
            + ["- [", "  ? x", "'", "\t- a", "&a x", "*a", "!!int x", "key: |", "  - {", "---", "..."]
        ),
        max_size=40,
    )
)
def test_shuffled_genome_lines_never_raise(lines, scratch):
    """Text that is nearly YAML and nearly a genome: real lines of genomes, reordered."""
    _validate_file(scratch / "lines.yaml", "\n".join(lines).encode())


# -- (c) every command that reads a file or an id ------------------------------------------
@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> str:
    """A store with its schema and no runs: every id is bad input."""
    from dogma_evolve.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'evolve.db'}"
    Store(url)
    return url


IDS = st.one_of(
    st.text(max_size=40).filter(lambda s: "\x00" not in s),  # argv cannot hold NUL
    st.from_regex(r"\A[0-9a-fA-F]{1,70}\Z"),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(1, 5000).map(lambda n: "9" * n),  # past int()'s 4300-digit limit
    st.sampled_from(["0", "1", " 1 ", "-1", "1e3", "0x10", "٣", "²", "1_000", "deadbeef" * 9]),
)
ID_COMMANDS = [["audit"], ["lineage"], ["replay"], ["export", "-o", "{out}"]]


def _id_argv(command: list[str], key: str, store_url: str, out: Path) -> list[str]:
    argv = [part.replace("{out}", str(out)) for part in command] + ["--store", store_url]
    if command[0] == "export":
        return [*argv, f"--id={key}"]  # = keeps an id that starts with "-" an id
    return [*argv, "--", key]


@FUZZ
@pytest.mark.slow  # 150 examples through the CLI: `make test` runs it, `make test-fast` not
@given(key=IDS)
@pytest.mark.parametrize("command", ID_COMMANDS, ids=lambda c: c[0])
def test_commands_answer_bad_ids_in_one_line(command, key, empty_store, scratch):
    code, _, err = run_cli(_id_argv(command, key, empty_store, scratch / "export"))
    assert_one_line_refusal(code, err)
    assert not (scratch / "export").exists()


@pytest.mark.parametrize(
    "key", ["9223372036854775808", "9" * 5000, "²"], ids=["2^63", "5000 digits", "superscript"]
)
@pytest.mark.parametrize("command", ID_COMMANDS, ids=lambda c: c[0])
def test_commands_answer_numeric_junk_ids_in_one_line(command, key, empty_store, scratch):
    """Found by the fuzzing above: non-ASCII digits and ids past 64 bits used to raise."""
    code, _, err = run_cli(_id_argv(command, key, empty_store, scratch / "export"))
    assert_one_line_refusal(code, err)


@FUZZ
@pytest.mark.slow  # 150 examples through the CLI: `make test` runs it, `make test-fast` not
@given(content=st.binary(max_size=1024) | mutated_documents().map(_dump))
def test_genome_show_accepts_or_refuses_in_one_line(content, scratch):
    path = scratch / "show.yaml"
    path.write_bytes(content)
    code, out, err = run_cli(["genome", "show", str(path)])
    assert code in (0, 2), err
    if code == 2:
        assert_one_line_refusal(code, err)
    else:
        assert out.startswith("genome ")


@FUZZ
@given(
    source=st.one_of(
        st.text(min_size=1, max_size=60).filter(lambda s: "\x00" not in s and not s.startswith("-")),
        st.text(max_size=30).map(lambda s: f"preset:{s}").filter(lambda s: "\x00" not in s),
        st.sampled_from(
            ["/", ".", "/dev/null", "/proc/self/mem", "/etc/shadow", "preset:", "preset:../../etc/passwd"]
        ),
    )
)
@pytest.mark.parametrize("command", ["show", "validate"])
def test_genome_commands_answer_bad_sources_in_one_line(command, source):
    if source.startswith("preset:") and source.removeprefix("preset:") in PRESETS:
        return
    code, _, err = run_cli(["genome", command, source])
    if code != 2:  # only an existing file that happens to be a genome could pass
        assert code == 0 and Path(source).is_file()
        return
    assert_one_line_refusal(code, err)


# -- allocation failures are oom at the source ---------------------------------------------
@FUZZ
@given(prefix=st.text(max_size=20), size=st.integers(1, 2**62), windows=st.booleans())
def test_cpu_allocation_failures_are_oom(prefix, size, windows):
    from dogma_evolve.evaluation import classify_failure

    wording = "not enough memory" if windows else "can't allocate memory"
    error = RuntimeError(
        f"{prefix}[enforce fail at alloc_cpu.cpp:127] err == 0. "
        f"DefaultCPUAllocator: {wording}: you tried to allocate {size} bytes."
    )
    status, reason = classify_failure(error)
    assert status == "oom"
    assert "\n" not in reason and "DefaultCPUAllocator" in reason


def test_a_real_cpu_allocation_failure_is_oom():
    import torch

    from dogma_evolve.evaluation import classify_failure

    with pytest.raises(RuntimeError) as caught:
        torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: refused before anything is touched
    assert classify_failure(caught.value)[0] == "oom"
    assert classify_failure(RuntimeError("boom in forward"))[0] == "crash"


# -- nothing we load is a pickle from outside ----------------------------------------------
# (module, function) pairs that unpickle; torch.load is allowed with weights_only=True only.
_UNPICKLERS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("cloudpickle", "load"),
    ("cloudpickle", "loads"),
    ("dill", "load"),
    ("dill", "loads"),
    ("joblib", "load"),
    ("_pickle", "load"),
    ("_pickle", "loads"),
}
# The NAS-Bench-201 reader subclasses pickle.Unpickler with a find_class that refuses all.
_ALLOWED = {("evolution/spaces/nb201.py", "pickle.Unpickler")}


def _python_sources() -> list[Path]:
    """Every ``.py`` file under :data:`REPO` outside the skipped and hidden folders (which are
    never entered: a virtualenv holds tens of thousands of files) and not hidden itself."""
    skip = {".venv", ".git", "build", "dist", "node_modules", "__pycache__"}
    found = []
    for root, folders, files in os.walk(REPO):
        folders[:] = sorted(f for f in folders if f not in skip and not f.startswith("."))
        found += [Path(root) / f for f in sorted(files) if f.endswith(".py") and not f.startswith(".")]
    return found


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def unpickling_calls(path: Path) -> list[str]:
    """`file:line name` for every call or subclass that could unpickle, per the rules above."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):  # import pickle as pk; from torch import load
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    rel = path.relative_to(REPO).as_posix()
    found = []
    for node in ast.walk(tree):
        targets: list[tuple[ast.AST, ast.Call | None]] = []
        if isinstance(node, ast.Call):
            targets.append((node.func, node))
        elif isinstance(node, ast.ClassDef):
            targets += [(base, None) for base in node.bases]
        for target, call in targets:
            name = _dotted(target, aliases)
            if name is None:
                continue
            parts = tuple(name.split("."))
            if parts[-2:] == ("torch", "load") or name == "torch.load":
                safe = call is not None and any(
                    k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in call.keywords
                )
                if not safe:
                    found.append(f"{rel}:{node.lineno} torch.load without weights_only=True")
            elif parts[-2:] in _UNPICKLERS and (rel, ".".join(parts[-2:])) not in _ALLOWED:
                found.append(f"{rel}:{node.lineno} {name}")
            elif (
                parts[-1] == "load"
                and parts[0] in ("np", "numpy")
                and call is not None
                and any(k.arg == "allow_pickle" for k in call.keywords)
            ):
                found.append(f"{rel}:{node.lineno} {name}(allow_pickle=...)")
    return found


def test_no_source_unpickles_outside_data():
    sources = _python_sources()
    assert len(sources) > 50 and REPO / "evolution" / "spaces" / "nb201.py" in sources
    offenders = [hit for path in sources for hit in unpickling_calls(path)]
    assert offenders == []


def test_the_scan_catches_what_it_must(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle as pk\nfrom torch import load\nimport torch\n"
        "pk.loads(b'')\nload('w.pt')\ntorch.load('w.pt', weights_only=False)\n"
        "torch.load(\n  'w.pt',\n)\nclass U(pk.Unpickler): pass\n"
        "torch.load('ok.pt', weights_only=True)\n"
    )
    hits = sorted(unpickling_calls(bad), key=lambda h: int(h.split()[0].split(":")[1]))
    assert [h.split()[0] for h in hits] == ["bad.py:4", "bad.py:5", "bad.py:6", "bad.py:7", "bad.py:10"], hits


class _Payload:
    def __reduce__(self):
        return (print, ("unpickled code ran",))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("payload", ["callable", "class", "numpy"])
def test_the_table_reader_refuses_every_class(protocol, payload, capsys):
    import numpy as np

    from dogma_evolve.evolution.spaces.nb201 import load_table_file

    objects = {"callable": {"a": _Payload()}, "class": {"a": _Payload}, "numpy": {"a": np.zeros(2)}}
    data = pickle.dumps(objects[payload], protocol=protocol)
    assert any(op.name in ("GLOBAL", "STACK_GLOBAL", "INST") for op, _, _ in pickletools.genops(data))
    with pytest.raises((pickle.UnpicklingError, ValueError)):
        load_table_file(data)
    assert "unpickled code ran" not in capsys.readouterr().out


def test_the_table_reader_refuses_globals_by_every_opcode():
    from dogma_evolve.evolution.spaces.nb201 import load_table_file

    hostile = [
        b"cos\nsystem\n(S'true'\ntR.",  # GLOBAL + REDUCE
        b"(cos\nsystem\nS'true'\no.",  # OBJ
        b"(S'true'\nios\nsystem\n.",  # INST
        b"\x80\x04\x8c\x02os\x8c\x06system\x93S'true'\n\x85R.",  # STACK_GLOBAL
        b"\x80\x02\x82\x01.",  # EXT1: unregistered extension code
        b"\x80\x02P1\n.",  # PERSID
    ]
    for data in hostile:
        with pytest.raises((pickle.UnpicklingError, ValueError)):
            load_table_file(data)


def test_the_table_reader_loads_plain_data():
    from dogma_evolve.evolution.spaces.nb201 import load_table_file

    table = {"012340": {"val_acc": [91.5, 92.0], "size": 1.5, "ok": True, "tag": None}}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert load_table_file(pickle.dumps(table, protocol=protocol)) == table
