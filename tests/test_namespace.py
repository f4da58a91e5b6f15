"""The project's own import namespace, tried as a user would: from a folder of their own, beside
today's transformers and Hugging Face's `kernels`, with a stored run of the old layout, and with
a copy of ours that another distribution installed.

- Beside Hugging Face's `kernels`: a search whose generation 0 holds SSM and recurrent kinds
  records no crash (before the namespace, 1 of 4 candidates crashed on an `AttributeError` from
  the wrong `kernels`), and its best exported with `--format hf` loads through transformers in
  a fresh interpreter where `import kernels` is Hugging Face's.
- The old layout: a store written before the namespace by a run with a plugin whose file says
  `from genome import KindSpec` resumes from a foreign folder and exports (the old names alias
  ours, `genome.legacy_names`).
- The preflight: `dogma_evolve` resolving to another distribution's files stops `evolve` with
  one line naming both.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dogma_evolve
from dogma_evolve.evolution.cli import preflight

FIXTURES = Path(__file__).parent / "store" / "fixtures" / "flat_layout"
OLD_RUN = "00b92fb84745"  # the fixture's run (README beside it)
EVOLVE = [sys.executable, "-m", "dogma_evolve.evolution.cli.main"]


def evolve(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`evolve ARGV` in a fresh process whose working folder is `cwd` (not the repository)."""
    return subprocess.run(
        [*EVOLVE, *argv], cwd=cwd, capture_output=True, text=True, timeout=900, env=env or dict(os.environ)
    )


def test_the_preflight_accepts_this_install() -> None:
    assert preflight.check() is None


def test_the_preflight_refuses_a_copy_of_ours_that_another_distribution_installed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    source = Path(dogma_evolve.__file__).parent
    shutil.copytree(source, site / "dogma_evolve", ignore=shutil.ignore_patterns("__pycache__", "*.db"))
    info = site / "impostor-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor\nVersion: 9.9\n")
    (info / "top_level.txt").write_text("dogma_evolve\n")
    files = sorted(p.relative_to(site).as_posix() for p in (site / "dogma_evolve").rglob("*") if p.is_file())
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = evolve(tmp_path, "genome", "validate", "preset:llama3-8b", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "dogma_evolve resolves to" in lines[0] and str(site) in lines[0]
    assert "impostor 9.9" in lines[0] and "dogma-evolve" in lines[0]


def _copy_old_store(tmp_path: Path) -> str:
    for name in ("flat_layout.db", "legacy_deltanet.py"):
        shutil.copyfile(FIXTURES / name, tmp_path / name)
    return f"sqlite:///{tmp_path / 'flat_layout.db'}"


@pytest.mark.slow
def test_a_run_stored_before_the_namespace_resumes_and_exports_from_a_foreign_folder(tmp_path: Path) -> None:
    url = _copy_old_store(tmp_path)
    assert "from genome import KindSpec" in (tmp_path / "legacy_deltanet.py").read_text()
    resumed = evolve(tmp_path, "run", "--resume", OLD_RUN, "--generations", "2", "--workers", "1", "--quiet",
                     "--json", "--store", url)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "plugin legacy_deltanet#6597ea3cda07ce5e: imported module legacy_deltanet" in resumed.stderr
    with sqlite3.connect(tmp_path / "flat_layout.db") as db:
        generations = db.execute("SELECT last_generation FROM runs WHERE id = ?", (OLD_RUN,)).fetchone()
        crashes = db.execute("SELECT count(*) FROM evaluations WHERE status = 'crash'").fetchone()
    assert generations == (2,) and crashes == (0,)
    out = tmp_path / "best-model"
    exported = evolve(
        tmp_path, "export", "--run", OLD_RUN, "--best", "-o", str(out), "--json", "--store", url
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (out / "dogma_model" / "__init__.py").is_file() and (out / "model.pt2").is_file()


needs_hf_kernels = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("kernels") is None,
    reason="transformers and Hugging Face's kernels (the test and hf extras) are not installed",
)

LOAD_HF = r"""
import json, sys
import kernels, torch
from transformers import AutoModelForCausalLM
assert hasattr(kernels, "get_kernel"), kernels.__file__  # Hugging Face's, not ours
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
ids = torch.randint(model.config.vocab_size, (1, 8))
with torch.no_grad():
    logits = model(ids).logits
print(json.dumps({"kernels": kernels.__file__, "shape": list(logits.shape),
                  "finite": bool(torch.isfinite(logits).all())}))
"""


@pytest.mark.slow
@needs_hf_kernels
def test_a_search_beside_hugging_face_kernels_records_no_crash_and_its_hf_export_loads(
    tmp_path: Path,
) -> None:
    hf_kernels = importlib.metadata.distribution("kernels")
    assert hf_kernels.metadata["Name"].lower() == "kernels"
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    # seed 1 draws a preset and two random genomes, one with mamba and lstm, one with s4 and dna
    argv = ["--population", "3", "--generations", "0", "--steps", "5", "--task", "mqar", "--seed", "1"]
    argv += ["--confirm", "1"]  # one row per genome: the 3 counted below
    searched = evolve(tmp_path, "run", *argv, "--workers", "1", "--quiet", "--json", "--store", url)
    assert searched.returncode == 0, searched.stderr[-3000:]
    with sqlite3.connect(tmp_path / "evolve.db") as db:
        statuses = db.execute("SELECT status, count(*) FROM evaluations GROUP BY status").fetchall()
        documents = [row[0] for row in db.execute("SELECT yaml FROM genomes")]
    assert dict(statuses) == {"ok": 3}, statuses
    kinds = " ".join(documents)
    assert "kind: mamba" in kinds, "generation 0 holds no SSM"
    assert any(f"kind: {k}" in kinds for k in ("lstm", "rglru", "rwkv", "gru")), "and no recurrent kind"

    hf = tmp_path / "hf"
    exported = evolve(tmp_path, "export", "--best", "--format", "hf", "-o", str(hf), "--store", url)
    assert exported.returncode == 0, exported.stderr[-3000:]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", LOAD_HF, str(hf)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["kernels"] == str(Path(str(hf_kernels.locate_file("kernels/__init__.py"))))
    assert loaded["shape"][:2] == [1, 8] and loaded["finite"]
