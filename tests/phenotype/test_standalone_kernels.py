"""An exported model carries DOGMA's fast kernels, not only the references: the standalone
package and the Hugging Face directory pick their backend as the project's dispatcher does.

Checked in fresh interpreters where our packages cannot be imported:

- on CPU the package's dispatcher picks the fast path (`auto` -> `cpu`), the C++ kernels build,
  a model's training step goes through it, and every op's CPU path matches the package's own
  reference in float64, forward and gradients (a model's logits and parameter gradients too);
- without a compiler or ninja it warns once and runs the reference (bit for bit);
- with triton (in interpreter mode, no GPU) the package's Triton kernels match its reference;
- the Hugging Face directory loads without triton and uses the C++ path; transformers'
  requirement check (run on every module of a Hub model) finds no triton in any of its files;
- the export's logits check compares both paths: a reference that went wrong is caught.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.phenotype.standalone.hf import write_hf
from dogma_evolve.phenotype.standalone.writer import PACKAGE, StandaloneError, check_package, write_package
from tests.phenotype.test_standalone import BLOCKED, GENOMES, perturbed_example

SCRIPT = r'''
import json, os, sys, warnings
from pathlib import Path

SITE, WHERE, MODE, BLOCKED = sys.argv[1], Path(sys.argv[2]), sys.argv[3], set(json.loads(sys.argv[4]))


ROOTS = [str(WHERE), os.environ.get("HF_HOME", str(WHERE))]  # the exported code, transformers' copy
violations = []


class Blocker:
    """Refuses the blocked packages; records an import of one by the exported code. Loading
    through transformers, what others import stays importable (transformers probes for triton
    and imports Hugging Face's own `kernels`)."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in BLOCKED:
            return None
        frame = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename.startswith("<frozen") or "/importlib/" in frame.f_code.co_filename
        ):
            frame = frame.f_back
        importer = frame.f_code.co_filename if frame is not None else "?"
        ours = any(importer.startswith(root) for root in ROOTS)
        if ours:
            violations.append(f"{name} imported by {importer}")
        if MODE == "hf" and not ours:
            return None
        raise ModuleNotFoundError(f"blocked: {name}", name=name)


sys.meta_path.insert(0, Blocker())
sys.path[:] = [p for p in sys.path if "site-packages" not in p] + [SITE]
import torch
import torch.nn.functional as F

F64 = torch.float64
r = {}


def outputs_and_grads(fn, inputs, seed=1):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    gen = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, leaves)]
    return [o.detach() for o in outs] + grads


def difference(got, want):
    """Largest difference relative to the reference's scale, over outputs and gradients."""
    return max(float((g - w).abs().max()) / (1.0 + float(w.abs().max())) for g, w in zip(got, want))


def ops(kernels, length, dk):
    g = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=F64)
    b, d, n, T, C, H = 2, 4, 3, 20, 5, 3
    A = -2 * (0.5 + torch.rand(d, n, generator=g, dtype=F64))
    scan = [rand(b, d, length), 0.5 * rand(b, d, length), A, rand(b, n, length), rand(b, n, length)]
    scan += [rand(d), rand(b, d, length), rand(d), rand(b, d, n)]
    wkv = [torch.rand(C, generator=g, dtype=F64) + 0.1, rand(C), rand(b, T, C), rand(b, T, C)]
    glr = [rand(b, H, T, dk), rand(b, H, T, dk), rand(b, H, T, dk)]
    glr += [-torch.rand(b, H, T, generator=g, dtype=F64), rand(b, H, dk, dk)]
    return {
        "selective_scan": (
            lambda backend: lambda u, dl, A, B, C, D, z, bias, h0: kernels.selective_scan(
                u, dl, A, B, C, D, z, bias, True, True, backend, initial_state=h0
            ),
            scan,
        ),
        "wkv": (lambda backend: lambda w, u, k, v: kernels.wkv(w, u, k, v, backend=backend), wkv),
        "gated_linear_recurrence": (
            lambda backend: lambda q, k, v, ld, s0: kernels.gated_linear_recurrence(
                q, k, v, ld, s0, backend=backend
            ),
            glr,
        ),
    }


def compare(kernels, backends, length, dk):
    out = {}
    for op, (fn, inputs) in ops(kernels, length, dk).items():
        want = outputs_and_grads(fn("torch"), inputs)
        for backend in backends.get(op, ()):
            out[f"{op}/{backend}"] = difference(outputs_and_grads(fn(backend), inputs), want)
    return out


def counting(module, name, calls):
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    setattr(module, name, counted)


if MODE == "hf":
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    model = AutoModelForCausalLM.from_pretrained(str(WHERE), trust_remote_code=True)
    prefix = type(model).__module__.rpartition(".")[0]
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    model.train()
    model(ids, labels=ids).loss.backward()  # the kernels' modules load on first use
    dispatch = sys.modules[prefix + ".dogma_kernels__dispatch"]
    scan_cpu = sys.modules[prefix + ".dogma_kernels_selective_scan_cpu"]
    calls = []
    counting(scan_cpu, "selective_scan", calls)
    model(ids, labels=ids).loss.backward()
    r["auto_on_cpu"] = dispatch.resolve_backend("auto", torch.device("cpu"), cpu_path=True)
    r["cpp_built"], r["fast_calls"] = scan_cpu.available(), len(calls)
else:
    sys.path.insert(0, str(WHERE))
    import dogma_model
    from dogma_model import kernels
    from dogma_model.kernels import _dispatch
    from dogma_model.kernels.selective_scan import cpu as scan_cpu

    r["kernels_file"] = kernels.__file__
    ids = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(0))

    def loss_of(model):
        torch.manual_seed(1)
        logits = model(ids)
        return F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten()), logits

    def logits_and_grads(model):
        model.zero_grad()
        loss, logits = loss_of(model)
        loss.backward()
        return [logits.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]

    if MODE == "cpu":
        r["auto_on_cpu"] = _dispatch.resolve_backend("auto", torch.device("cpu"), cpu_path=True)
        r["cpp_built"] = scan_cpu.available()
        from dogma_model.kernels.gated_linear_recurrence import cpu as scalar_cpu
        from dogma_model.kernels.wkv import cpu as wkv_cpu

        r["cpp_built_wkv_scalar"] = [wkv_cpu.available(), scalar_cpu.available()]
        backends = {"selective_scan": ["cpu"], "wkv": ["cpu"], "gated_linear_recurrence": ["cpu"]}
        r["ops"] = compare(kernels, backends, 70, 1)  # 70 steps: past the C++ scan's checkpoint
        model = dogma_model.load(dtype=F64).train()
        calls = []
        counting(scan_cpu, "selective_scan", calls)
        fast = logits_and_grads(model)
        r["fast_calls"] = len(calls)
        with _dispatch.reference_only():
            reference = logits_and_grads(model)
        r["reference_calls"] = len(calls) - r["fast_calls"]
        r["model"] = difference(fast, reference)
    elif MODE == "nocompiler":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = dogma_model.load().train()
            for _ in range(2):
                loss_of(model)[0].backward()
            r["cpp_built"] = scan_cpu.available()
            with torch.no_grad():
                fast = model(ids)
                with _dispatch.reference_only():
                    reference = model(ids)
        r["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        r["equal_to_reference"] = bool(torch.equal(fast, reference))
    elif MODE == "triton":
        from dogma_model.kernels.selective_scan import chunk

        chunk.CHUNK = 8  # several chunks in a short sequence (the interpreter is slow)
        r["chunk_file"] = chunk.__file__
        r["auto_on_cuda"] = _dispatch.resolve_backend(
            "auto", torch.device("cuda"), cpu_path=True, chunked_path=True, length=64, grad=True
        )
        backends = {"selective_scan": ["triton", "chunk"], "wkv": ["triton"]}
        backends["gated_linear_recurrence"] = ["triton", "chunk"]
        r["ops"] = compare(kernels, backends, 19, 4)
r["violations"] = violations
print(json.dumps(r))
'''


def run_fresh(where: Path, mode: str, tmp_path: Path, blocked: tuple[str, ...], **env: str) -> dict[str, Any]:
    """Run SCRIPT in a fresh interpreter (-I -S: no site hooks) that sees the installed
    third-party packages only, `blocked` refused; its result."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    script = tmp_path / "check_kernels.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(script), site, str(where), mode, json.dumps(blocked)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", **env},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["violations"] == [], result["violations"]
    return result


@pytest.fixture(scope="module")
def mamba_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Mamba genome's package (its kernels: every op's, with their fast paths)."""
    directory = tmp_path_factory.mktemp("export") / "mamba"
    model, ids, expected = perturbed_example(GENOMES["ssm-mamba"](), directory)
    check_package(write_package(model, GENOMES["ssm-mamba"](), directory)["package"], ids, expected)
    return directory


def test_the_package_picks_the_cpu_fast_paths_and_they_match_its_reference(mamba_package, tmp_path):
    r = run_fresh(mamba_package, "cpu", tmp_path, BLOCKED)
    assert Path(r["kernels_file"]).is_relative_to(mamba_package / PACKAGE)
    assert r["auto_on_cpu"] == "cpu" and r["cpp_built"], r
    assert r["cpp_built_wkv_scalar"] == [True, True], r  # wkv.cpp, scalar_scan.cpp: compared below
    assert set(r["ops"]) == {"selective_scan/cpu", "wkv/cpu", "gated_linear_recurrence/cpu"}
    assert max(r["ops"].values()) <= 1e-10, r["ops"]  # float64: outputs and every gradient
    # a training step runs the C++ scan; under reference_only it does not, and agrees
    assert r["fast_calls"] > 0 and r["reference_calls"] == 0, r
    assert r["model"] <= 1e-10, r


def test_without_a_compiler_the_package_warns_once_and_runs_the_reference(mamba_package, tmp_path):
    empty = tmp_path / "no-tools"  # PATH without c++ or ninja, and no build cached
    empty.mkdir()
    env = {"PATH": str(empty), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    r = run_fresh(mamba_package, "nocompiler", tmp_path, BLOCKED, **env)
    assert not r["cpp_built"]
    assert len(r["warnings"]) == 1 and "falling back to the PyTorch reference" in r["warnings"][0], r
    assert r["equal_to_reference"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_package_carries_the_triton_kernels(mamba_package, tmp_path):
    blocked = tuple(b for b in BLOCKED if b != "triton")
    r = run_fresh(mamba_package, "triton", tmp_path, blocked, TRITON_INTERPRET="1")
    assert Path(r["chunk_file"]).is_relative_to(mamba_package / PACKAGE)
    assert r["auto_on_cuda"] == "chunk"
    assert len(r["ops"]) == 5 and max(r["ops"].values()) <= 1e-8, r["ops"]


def _sabotage_reference(path: Path) -> None:
    """Make a copied selective_scan reference return 1.5 times its output."""
    path.write_text(
        path.read_text()
        + "\n\n_right = selective_scan\n\n\ndef selective_scan(*args, **kwargs):\n"
        + "    out = _right(*args, **kwargs)\n"
        + "    return (1.5 * out[0], out[1]) if isinstance(out, tuple) else 1.5 * out\n"
    )


def test_the_export_check_compares_the_fast_path_and_the_reference(tmp_path):
    genome = GENOMES["ssm-mamba"]()
    model, ids, expected = perturbed_example(genome, tmp_path / "broken")
    package = Path(write_package(model, genome, tmp_path / "broken")["package"])
    _sabotage_reference(package / "kernels" / "selective_scan" / "reference.py")
    with pytest.raises(StandaloneError, match="reference kernels"):
        check_package(package, ids, expected)


needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers (the hf extra) is not installed"
)


@needs_transformers
def test_the_hf_directory_carries_the_fast_paths_and_requires_no_triton(tmp_path, monkeypatch):
    from transformers.dynamic_module_utils import get_imports

    from dogma_evolve.evolution.export.hf import check_hf

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    genome = GENOMES["ssm-mamba"]()
    directory = tmp_path / "hf"
    model, ids, expected = perturbed_example(genome, directory)
    info = write_hf(model, genome, directory)
    check_hf(directory, ids, expected)
    assert {"dogma_kernels_selective_scan_cpu", "dogma_kernels_selective_scan_chunk"} <= set(info["modules"])
    # what transformers checks before loading: a module of a Hub model asks for no triton
    for path in directory.glob("*.py"):
        assert "triton" not in get_imports(path), path
    hf_home = tmp_path / "hf-home"
    r = run_fresh(directory, "hf", tmp_path, BLOCKED, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    assert r["auto_on_cpu"] == "cpu" and r["cpp_built"] and r["fast_calls"] > 0, r

    # the directory's check runs the reference kernels too: a wrong one is caught
    broken = tmp_path / "broken"
    model, ids, expected = perturbed_example(genome, broken)
    write_hf(model, genome, broken)
    _sabotage_reference(broken / "dogma_kernels_selective_scan_reference.py")
    with pytest.raises(StandaloneError, match="reference kernels"):
        check_hf(broken, ids, expected)


def test_the_phenotype_and_its_export_share_one_cpp_build(mamba_package):
    from dogma_evolve.kernels import _build

    exported = (mamba_package / PACKAGE / "kernels" / "_build.py").read_text()
    root = Path(_build.__file__).parent
    sources = [
        root / "selective_scan" / "selective_scan.cpp",
        root / "wkv" / "wkv.cpp",
        root / "gated_linear_recurrence" / "scalar_scan.cpp",
    ]
    namespace: dict[str, Any] = {}
    exec(compile(exported, "exported_build", "exec"), namespace)  # noqa: S102 - our own written file
    assert namespace["EMBEDDED"] == {source.name: source.read_text() for source in sources}
