"""`evolve export` writes `dogma_model/`, a self-contained, trainable package: checked in a
fresh interpreter where none of our packages (nor triton) can be imported.

- through the command line: a tiny real run, `evolve export --best`, then the package;
- through `phenotype.standalone.writer.write_package`: scaled-down presets (attention, Mamba,
  hybrids, RWKV, DOGMA's own stack) and a catalogue genome, together every block kind;
- the writer's own guarantees: only torch, safetensors and the standard library are
  imported, only the modules a genome needs are copied, foreign imports are refused.

In the fresh interpreter each package must: load; give the phenotype's logits on the
export's `example.safetensors`; train (every parameter requires grad, finite gradients,
one SGD step lowers the loss); decode with `step` what the parallel forward computes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.genome import PRESETS, Genome
from dogma_evolve.phenotype import REGISTRY, decode
from dogma_evolve.phenotype.standalone.writer import (
    PACKAGE,
    StandaloneError,
    check_package,
    rewrite,
    write_package,
)

# our namespace, the packages' names before it (an export must import neither: a bare `kernels`
# would be Hugging Face's today), and triton
BLOCKED = ("dogma_evolve", "genome", "phenotype", "kernels", "evolution", "evaluation", "store", "triton")

# Runs in a fresh interpreter (-I -S: no site hooks, so the editable install's .pth is not
# read) that sees the installed third-party packages only, with our packages blocked.
CHECK = r'''
import json, sys
from pathlib import Path

SITE, DIRS = sys.argv[1], [Path(d) for d in json.loads(sys.argv[2])]
BLOCKED = set(json.loads(sys.argv[3]))
violations = []


class Blocker:
    """Refuses our packages and triton. An import made by a package's own code is a
    violation; torch probing for triton (say, as a package's decorator loads torch._dynamo)
    is torch's business."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in BLOCKED:
            return None
        frame = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename.startswith("<frozen") or "/importlib/" in frame.f_code.co_filename
        ):
            frame = frame.f_back  # the import machinery: the importer is the first frame past it
        importer = Path(frame.f_code.co_filename) if frame is not None else Path("?")
        if any(d in importer.parents for d in DIRS):
            violations.append(f"{name} imported by {importer}")
        raise ModuleNotFoundError(f"blocked: {name}", name=name)


sys.meta_path.insert(0, Blocker())
sys.path[:] = [p for p in sys.path if "site-packages" not in p] + [SITE]
import importlib
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

torch.manual_seed(0)
results = {}
for d in DIRS:
    for key in [k for k in sys.modules if k.partition(".")[0] == "dogma_model"]:
        del sys.modules[key]
    sys.path.insert(0, str(d))
    try:
        dogma_model = importlib.import_module("dogma_model")
    finally:
        sys.path.remove(str(d))
    r = {"file": dogma_model.__file__}
    model = dogma_model.load()
    r["eval_mode"] = not model.training
    example = load_file(str(d / "example.safetensors"))
    ids, expected = example["input"], example["output"]
    with torch.no_grad():
        got = model(ids)
    r["shape"] = list(got.shape)
    r["forward_diff"] = float((got - expected).abs().max())
    r["logit_scale"] = float(expected.abs().max())

    # step-by-step decoding from the recurrent state equals the parallel forward
    prefix = ids[:, :8]
    with torch.no_grad():
        parallel = model(prefix)
    state = model.init_state(prefix.shape[0])
    steps = []
    for t in range(prefix.shape[1]):
        logits_t, state = model.step(prefix[:, t], state)
        steps.append(logits_t)
    r["step_diff"] = float((torch.stack(steps, 1) - parallel).abs().max())
    r["generated"] = list(model.generate(prefix[:, :4], 4).shape)
    double = dogma_model.load(dtype=torch.float64)
    with torch.no_grad():
        parallel = double(prefix)
    state = double.init_state(prefix.shape[0])
    steps = []
    for t in range(prefix.shape[1]):
        logits_t, state = double.step(prefix[:, t], state)
        steps.append(logits_t)
    r["step_diff_float64"] = float((torch.stack(steps, 1) - parallel).abs().max())

    # one optimizer step in training mode
    model.train()
    params = list(model.parameters())
    r["all_require_grad"] = all(p.requires_grad for p in params)
    targets = ids.roll(-1, dims=1)

    def loss_of():
        torch.manual_seed(1)  # the same sampling noise (DNA's transitions) in both passes
        logits = model(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()) + model.aux_loss()

    loss = loss_of()
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    r["grads_finite"] = all(bool(torch.isfinite(g).all()) for g in grads)
    r["grads_nonzero"] = sum(bool(g.abs().sum() > 0) for g in grads)
    r["params"] = len(params)
    torch.optim.SGD(params, lr=1e-3).step()
    with torch.no_grad():
        r["loss_before"], r["loss_after"] = float(loss), float(loss_of())
    results[str(d)] = r
print(json.dumps({"results": results, "violations": violations}))
'''


def check_in_fresh_interpreter(dirs: list[Path], tmp_path: Path) -> dict[str, Any]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    script = tmp_path / "check_standalone.py"
    script.write_text(CHECK)
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(script),
            site,
            json.dumps([str(d) for d in dirs]),
            json.dumps(BLOCKED),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["violations"] == []
    assert set(out["results"]) == {str(d) for d in dirs}
    return out["results"]


def assert_package_works(r: dict[str, Any], directory: Path) -> None:
    assert Path(r["file"]) == directory / PACKAGE / "__init__.py"
    assert r["eval_mode"]
    # the phenotype's logits (its kernels may have taken the C++ path: float rounding only)
    assert r["forward_diff"] <= 1e-5 * max(1.0, r["logit_scale"]), r
    assert r["step_diff"] <= 1e-4 * max(1.0, r["logit_scale"]), r
    assert r["step_diff_float64"] <= 1e-8, r
    assert r["generated"][1] == 8
    assert r["all_require_grad"] and r["grads_finite"], r
    assert r["grads_nonzero"] >= r["params"] // 2, r
    assert r["loss_after"] < r["loss_before"], r


# -- through the command line --------------------------------------------------------------
def evolve(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "dogma_evolve.evolution.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"evolve {' '.join(args)}:\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_cli_export_writes_a_standalone_trainable_package(tmp_path):
    store = f"sqlite:///{tmp_path / 'run.db'}"
    # the initial population alone, its best not re-trained under more seeds: 4 trainings
    run = ["--population", "4", "--generations", "0", "--steps", "5", "--min-steps", "0", "--confirm", "1"]
    evolve("run", *run, "--workers", "1", "--seed", "3", "--quiet", "--store", store)
    out = tmp_path / "best"
    info = json.loads(evolve("export", "--best", "-o", str(out), "--store", store, "--json").stdout)
    assert PACKAGE in info["files"] and info["package_kinds"]
    package = out / PACKAGE
    assert {"__init__.py", "config.json", "model.safetensors", "model.py", "blocks"} <= {
        p.name for p in package.iterdir()
    }
    assert not list(package.rglob("__pycache__"))  # the export's own check leaves no bytecode
    config = json.loads((package / "config.json").read_text())
    assert config["genome_id"] == info["genome_id"]
    [r] = check_in_fresh_interpreter([out], tmp_path).values()
    assert_package_works(r, out)
    assert r["shape"][:2] == [2, 64]


# -- through the library, every block kind ------------------------------------------------
PINNED = {"vocab": 61, "max_len": 32}


def _preset(name: str, d_model: int = 32) -> Genome:
    doc = scale_down(PRESETS[name](), d_model, 1, PINNED)
    for region in doc["regions"]:
        for base in region.get("bases", []):
            if base["kind"] == "rglru":  # its width is not a `hidden`: scale it here
                base["params"].update(width=2 * d_model, heads=2)
    return Genome.from_dict(doc)


def _base(b: str, kind: str, **params: Any) -> dict[str, Any]:
    return {"base": b, "kind": kind, "params": params}


# The kinds no scaled-down preset holds, with what presets leave out: learned positions,
# post-norm, biases, an untied head, a repressing gate, a shared and a looped region.
CATALOGUE = {
    "regions": [
        {
            "id": "s0",
            "type": "structural",
            "settings": {
                "d_model": 32,
                **PINNED,
                "positions": "learned",
                "norm": "layernorm",
                "norm_position": "post",
                "bias": True,
                "tie_embeddings": False,
            },
        },
        {"id": "r1", "type": "regulatory", "bases": [_base("C", "gate", hidden=8)]},
        {
            "id": "c1",
            "type": "coding",
            "bases": [
                _base("T", "mla", heads=2, q_rank=8, kv_rank=8, rope_dim=4),
                _base("T", "s4", d_state=4),
                _base("T", "lstm", hidden=12),
                _base("T", "gru", hidden=10),
                _base("T", "conv", kernel=3),
                _base("A", "tetra", neighbours=6),
                _base("A", "tetra_reach", window=1, stride=3),
                _base("T", "dna", reactions=4, depth=2),
                _base("A", "mlp", hidden=40, activation="relu"),
            ],
        },
        {
            "id": "c2",
            "type": "coding",
            "bases": [
                _base("T", "linear_attention", heads=2),
                _base("T", "mamba2", head_dim=16, d_state=4),
                _base("T", "retention", heads=2),
                _base("A", "geglu", hidden=24),
            ],
        },
        {
            "id": "c3",
            "type": "coding",
            "bases": [
                _base("T", "linear_attention", heads=2),
                _base("T", "mamba2", head_dim=16, d_state=4),
                _base("T", "retention", heads=2),
                _base("A", "geglu", hidden=24),
            ],
        },
    ],
    "edges": [
        {"source": "r1", "target": "c2", "kind": "represses"},
        {"source": "c2", "target": "c3", "kind": "shares"},
        {"source": "c1", "target": "c3", "kind": "loop"},
    ],
}

# A regulatory hierarchy: a router-only regulator over a gate regulator over two more,
# one of them regulated twice, gating coding regions at every level.
CASCADE = {
    "regions": [
        {"id": "s0", "type": "structural", "settings": {"d_model": 32, **PINNED}},
        {"id": "r0", "type": "regulatory", "bases": [_base("C", "allosteric", k=1, width=4)]},
        {"id": "r1", "type": "regulatory", "bases": [_base("C", "gate", hidden=6)]},
        {"id": "c1", "type": "coding", "bases": [_base("T", "attention", heads=2), _base("A", "swiglu")]},
        {
            "id": "r2",
            "type": "regulatory",
            "bases": [_base("C", "gate", hidden=4), _base("C", "gate", hidden=3)],
        },
        {"id": "r3", "type": "regulatory", "bases": [_base("C", "gate", hidden=5)]},
        {"id": "p2", "type": "promoter", "settings": {"copies": 2}},
        {"id": "c2", "type": "coding", "bases": [_base("T", "conv", kernel=3)]},
    ],
    "edges": [
        {"source": "r0", "target": "r1", "kind": "activates"},
        {"source": "r1", "target": "r2", "kind": "represses"},
        {"source": "r1", "target": "r3", "kind": "activates"},
        {"source": "r2", "target": "r3", "kind": "activates"},
        {"source": "r1", "target": "c1", "kind": "activates"},
        {"source": "r3", "target": "c2", "kind": "represses"},
    ],
}

GENOMES = {
    "attention-gpt2": lambda: _preset("gpt2-small"),
    "attention-llama3": lambda: _preset("llama3-8b"),
    "ssm-mamba": lambda: _preset("mamba-130m"),
    "hybrid-jamba": lambda: _preset("jamba"),
    "hybrid-griffin": lambda: _preset("griffin"),
    "rnn-rwkv4": lambda: _preset("rwkv4-169m"),
    "dogma": lambda: _preset("dogma"),
    "catalogue": lambda: Genome.from_dict(CATALOGUE),
    "cascade": lambda: Genome.from_dict(CASCADE),
}


def perturbed_example(
    genome: Genome, directory: Path, seed: int = 0
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """(model, ids, logits) of the genome with perturbed weights, the example written to
    `directory/example.safetensors`. The weights are perturbed so that an export that did
    not load them would differ (loop scales start at 0, norms at 1)."""
    torch.manual_seed(seed)
    model = decode(genome)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    ids = torch.randint(0, genome.structural["vocab"], (2, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = model(ids)
    directory.mkdir(parents=True)
    save_file({"input": ids, "output": expected}, str(directory / "example.safetensors"))
    return model, ids, expected


def export_phenotype(genome: Genome, directory: Path, seed: int = 0) -> dict[str, Any]:
    """What `evolve export` writes for the package check: the package and an example."""
    model, ids, expected = perturbed_example(genome, directory, seed)
    info = write_package(model, genome, directory)
    check_package(info["package"], ids, expected)  # what export_individual does, in-process
    return info


def test_library_exports_of_every_block_kind_load_train_and_step(tmp_path):
    dirs, kinds = [], set()
    for name, make in GENOMES.items():
        info = export_phenotype(make(), tmp_path / name)
        dirs.append(tmp_path / name)
        kinds |= set(info["kinds"])
    assert kinds == set(REGISTRY), f"kinds no export covers: {sorted(set(REGISTRY) - kinds)}"
    results = check_in_fresh_interpreter(dirs, tmp_path)
    for d in dirs:
        assert_package_works(results[str(d)], d)


# -- the writer's guarantees ----------------------------------------------------------------
def _imports_of(path: Path) -> set[str]:
    """Top-level names of every absolute import in one file."""
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            tops.add((node.module or "").split(".")[0])
    return tops


def _imports(package: Path) -> set[str]:
    """Top-level names of every absolute import in a package's files."""
    return set().union(*(_imports_of(path) for path in package.rglob("*.py")))


def test_package_imports_torch_safetensors_and_the_standard_library_only(tmp_path):
    info = export_phenotype(_preset("jamba"), tmp_path / "jamba")
    package = Path(info["package"])
    tops = _imports(package)
    assert not tops & (set(BLOCKED) - {"triton"})
    assert tops - set(sys.stdlib_module_names) == {"torch", "safetensors", "triton"}
    # triton only in the kernels' Triton paths, which the dispatchers import lazily
    assert {p.parent.name for p in package.rglob("*.py") if "triton" in _imports_of(p)} <= {
        "selective_scan",
        "gated_linear_recurrence",
        "wkv",
    }
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert {"kernels/_dispatch.py", "kernels/_build.py", "kernels/selective_scan/reference.py"} <= files
    assert {"kernels/selective_scan/cpu.py", "kernels/wkv/cpu.py", "kernels/selective_scan/chunk.py"} <= files
    config = json.loads((package / "config.json").read_text())
    assert config["format"] == "dogma_model/1" and config["model"]["class"] == "config:ModelConfig"


def test_only_the_modules_a_genome_needs_are_copied(tmp_path):
    package = Path(export_phenotype(_preset("llama3-8b"), tmp_path / "llama")["package"])
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert "blocks/attention.py" in files and "blocks/mlp.py" in files
    assert not any(f.startswith("kernels/") for f in files)  # attention needs no scan kernel
    assert not {"blocks/ssm.py", "blocks/dna.py", "blocks/moe.py"} & files


@pytest.mark.parametrize(
    "line",
    [
        "import dogma_evolve.evaluation",
        "from dogma_evolve.store import Store",
        "import triton",
        "import numpy",
        "from dogma_evolve.evolution import x",
        "from dogma_evolve.phenotype import decode",
        "from dogma_evolve import evaluation",
        "import evaluation",  # an old name (a plugin's of before the namespace) is still ours
    ],
)
def test_imports_the_package_cannot_carry_are_refused(line):
    with pytest.raises(StandaloneError):
        rewrite("dogma_evolve.phenotype.blocks.mlp", f"from __future__ import annotations\n\n{line}\n", set())


def test_imports_of_ours_become_relative():
    text = (
        "from dogma_evolve.phenotype.blocks.base import BlockConfig\n"
        "def f():\n"
        "    import dogma_evolve.kernels as kernels\n"
        "    from dogma_evolve.kernels import selective_scan  # noqa: F401\n"
    )
    out = rewrite("dogma_evolve.phenotype.blocks.ssm", text, set())
    assert out.splitlines() == [
        "from .base import BlockConfig",
        "def f():",
        "    from .. import kernels",
        "    from ..kernels import selective_scan  # noqa: F401",
    ]
    registry = rewrite(
        "dogma_evolve.phenotype.registry", "import dogma_evolve.phenotype.blocks  # noqa: F401\n", set()
    )
    assert registry == "from . import blocks  # noqa: F401\n"
    # a kernel's fast paths are copied too; a kernel module may import triton, a block may not
    fast = rewrite("dogma_evolve.kernels.wkv", "def f():\n    from . import triton as t\n", set())
    assert fast == "def f():\n    from . import triton as t\n"
    assert rewrite("dogma_evolve.kernels.wkv.triton", "import triton\n", set()) == "import triton\n"
