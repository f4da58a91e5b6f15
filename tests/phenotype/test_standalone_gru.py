"""An exported GRU model carries the fused C++ GRU (`kernels/recurrent`): its copy of
`kernels/_build.py` embeds `recurrent.cpp`, and in a fresh interpreter, where our packages
cannot be imported, a training step of the package's model goes through the C++ kernel and
gives the logits and parameter gradients of its `nn.GRU` path (`reference_only`) in float64."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype.standalone.writer import PACKAGE
from tests.phenotype.test_standalone import BLOCKED, PINNED, export_phenotype

SCRIPT = r"""
import json, sys
from pathlib import Path

SITE, WHERE, BLOCKED = sys.argv[1], Path(sys.argv[2]), set(json.loads(sys.argv[3]))


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
sys.path[:] = [p for p in sys.path if "site-packages" not in p] + [SITE]
sys.path.insert(0, str(WHERE))
import torch
import torch.nn.functional as F

import dogma_model
from dogma_model.kernels import _build, _dispatch
from dogma_model.kernels.recurrent import cpu as gru_cpu

calls = []
original = gru_cpu.gru


def counted(*args):
    calls.append(1)
    return original(*args)


gru_cpu.gru = counted
model = dogma_model.load(dtype=torch.float64).train()
ids = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(0))


def logits_and_grads():
    model.zero_grad()
    logits = model(ids)
    F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten()).backward()
    return [logits.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]


fast = logits_and_grads()
fast_calls = len(calls)
with _dispatch.reference_only():
    reference = logits_and_grads()
diff = max(float((f - r).abs().max()) / (1.0 + float(r.abs().max())) for f, r in zip(fast, reference))
print(json.dumps({
    "kernels_file": gru_cpu.__file__,
    "embedded": sorted(_build.EMBEDDED),
    "built": gru_cpu.available(),
    "fast_calls": fast_calls,
    "reference_calls": len(calls) - fast_calls,
    "tensors": len(fast),
    "diff": diff,
}))
"""


def _gru_genome() -> Genome:
    return Genome.from_dict(
        {
            "dogma": 1,
            "regions": [
                {"id": "s0", "type": "structural", "settings": {"d_model": 24, **PINNED}},
                {
                    "id": "c1",
                    "type": "coding",
                    "bases": [
                        {"base": "T", "kind": "gru", "params": {"hidden": 13}},
                        {"base": "A", "kind": "mlp", "params": {"hidden": 40}},
                    ],
                },
            ],
            "edges": [],
        }
    )


def run_fresh(where: Path, tmp_path: Path) -> dict[str, Any]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    script = tmp_path / "check_gru.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(script), site, str(where), json.dumps(BLOCKED)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_an_exported_gru_model_trains_through_the_cpp_gru_and_matches_nn_gru(tmp_path: Path) -> None:
    directory = tmp_path / "gru"
    info = export_phenotype(_gru_genome(), directory)  # includes the export's own logits check
    assert "gru" in info["kinds"]
    package = Path(info["package"])
    files = {p.relative_to(package).as_posix() for p in package.rglob("*")}
    assert {"kernels/recurrent/cpu.py", "kernels/recurrent/reference.py", "kernels/_build.py"} <= files
    r = run_fresh(directory, tmp_path)
    assert Path(r["kernels_file"]).is_relative_to(directory / PACKAGE)
    assert "recurrent.cpp" in r["embedded"] and r["built"], r
    assert r["fast_calls"] == 1 and r["reference_calls"] == 0, r  # one GRU block, one step
    assert r["tensors"] > 5 and r["diff"] <= 1e-10, r
