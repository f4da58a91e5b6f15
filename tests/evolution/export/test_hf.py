"""`evolve export --format hf` writes a transformers directory (remote code): checked in a
fresh interpreter where none of our packages can be imported, with torch, safetensors and
transformers only.

- through the library, for every block kind (the standalone export test's genomes: scaled-down
  presets, a catalogue genome and a regulatory cascade, together every registered kind);
- through the command line: a tiny real run, `evolve export --best --format hf`;
- the refusal: `--format hf` without transformers is one line, exit 2.

In the fresh interpreter, `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`
must: give the phenotype's logits on the export's `example.safetensors`; decode with the
recurrent state what the parallel forward computes; `generate` greedily (each token the
full forward's argmax); give transformers' shifted cross-entropy for `labels=`; lower that loss
in a few optimizer steps; and come back from `save_pretrained` with the same logits.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import REGISTRY, decode
from dogma_evolve.phenotype.standalone.hf import write_hf
from tests.phenotype.test_standalone import BLOCKED, GENOMES, perturbed_example

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers (the hf extra) is not installed"
)

# Runs in a fresh interpreter (-I -S: no site hooks, so the editable install's .pth is not
# read) that sees the installed third-party packages only.
CHECK = r'''
import importlib.util, json, sys
from pathlib import Path

SITE, DIRS, HF_HOME = sys.argv[1], [Path(d) for d in json.loads(sys.argv[2])], Path(sys.argv[3])
BLOCKED = set(json.loads(sys.argv[4]))
sys.path[:] = [p for p in sys.path if "site-packages" not in p] + [SITE]
# our packages must not be on the path at all (triton, installed, only must not be imported;
# an old name that an installed distribution owns, as Hugging Face's `kernels`, is theirs)
findable = sorted(
    b
    for b in BLOCKED - {"triton"}
    if (spec := importlib.util.find_spec(b)) is not None
    and (b == "dogma_evolve" or not str(spec.origin).startswith(SITE))
)
violations = []


class Blocker:
    """Records an import of our packages (or triton) made by the exported code (the
    directories, or transformers' copies of their modules under HF_HOME) and refuses it."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in BLOCKED:
            return None
        frame = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename.startswith("<frozen") or "/importlib/" in frame.f_code.co_filename
        ):
            frame = frame.f_back
        importer = Path(frame.f_code.co_filename) if frame is not None else Path("?")
        if any(d in importer.parents for d in [*DIRS, HF_HOME]):
            violations.append(f"{name} imported by {importer}")
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
        return None  # torch or transformers probing for an optional package: not found here


sys.meta_path.insert(0, Blocker())
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging

logging.set_verbosity_error()
logging.disable_progress_bar()


def loss_of(model, ids):
    torch.manual_seed(1)  # the same sampling noise (DNA's transitions) in every pass
    return model(ids, labels=ids).loss


results = {}
for d in DIRS:
    r = {}
    model = AutoModelForCausalLM.from_pretrained(str(d), trust_remote_code=True)
    r["class"] = f"{type(model).__module__}.{type(model).__name__}"
    r["eval_mode"] = not model.training
    example = load_file(str(d / "example.safetensors"))
    ids, expected = example["input"], example["output"]
    with torch.no_grad():
        logits = model(ids).logits
    r["forward_diff"] = float((logits - expected).abs().max())
    r["logit_scale"] = float(expected.abs().max())

    prefix = ids[:, :8]
    with torch.no_grad():
        stepped = model(prefix, use_cache=True)
        r["step_diff"] = float((stepped.logits - model(prefix).logits).abs().max())
        state = getattr(stepped, "cache", None) or getattr(stepped, "past_key_values", None)
        r["state_length"] = state.get_seq_length()
        out = model.generate(prefix[:, :4], max_new_tokens=6, do_sample=False)
        r["generated"] = list(out.shape)
        # each generated token is the full forward's argmax (up to float ties)
        gaps = []
        for t in range(4, out.shape[1]):
            last = model(out[:, :t]).logits[:, -1]
            gaps.append(float((last.max(-1).values - last.gather(1, out[:, t : t + 1])[:, 0]).max()))
        r["greedy_gap"] = max(gaps)
        try:
            model(ids, attention_mask=torch.ones_like(ids).index_fill(1, torch.tensor([0]), 0))
            r["padding"] = "accepted"
        except ValueError as e:
            r["padding"] = str(e)

        loss = model(ids, labels=ids).loss
        manual = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        r["loss_diff"] = float((loss - manual).abs())

    model.train()
    params = list(model.parameters())
    r["all_require_grad"] = all(p.requires_grad for p in params)
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = loss_of(model, ids)
        loss.backward()
        losses.append(float(loss))
        r["grads_finite"] = all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
        optimizer.step()
    with torch.no_grad():
        losses.append(float(loss_of(model, ids)))
    r["losses"] = losses

    model.eval()
    saved = d.parent / f"{d.name}-saved"
    model.save_pretrained(str(saved))
    r["saved_files"] = sorted(p.name for p in saved.iterdir())
    reloaded = AutoModelForCausalLM.from_pretrained(str(saved), trust_remote_code=True)
    with torch.no_grad():
        r["roundtrip_diff"] = float((reloaded(ids).logits - model(ids).logits).abs().max())
    results[str(d)] = r
print(json.dumps({"results": results, "violations": violations, "findable": findable}))
'''


def check_in_fresh_interpreter(dirs: list[Path], tmp_path: Path) -> dict[str, Any]:
    """Run CHECK over every directory in one fresh interpreter; its results by directory."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    script = tmp_path / "check_hf.py"
    script.write_text(CHECK)
    hf_home = tmp_path / "hf-home"
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(script),
            site,
            json.dumps([str(d) for d in dirs]),
            str(hf_home),
            json.dumps(BLOCKED),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["findable"] == [], "our packages are importable in the fresh interpreter"
    assert out["violations"] == []
    assert set(out["results"]) == {str(d) for d in dirs}
    return out["results"]


def assert_hf_model_works(r: dict[str, Any]) -> None:
    scale = max(1.0, r["logit_scale"])
    assert r["class"].startswith("transformers_modules.") and r["class"].endswith("DogmaForCausalLM"), r
    assert r["eval_mode"]
    assert r["forward_diff"] <= 1e-5 * scale, r  # the phenotype's (its kernels may be the C++ path)
    assert r["step_diff"] <= 1e-4 * scale, r
    assert r["state_length"] == 8
    assert r["generated"][1] == 10
    assert r["greedy_gap"] <= 1e-4 * scale, r
    assert "no attention mask" in r["padding"], r
    assert r["loss_diff"] <= 1e-5, r
    assert r["all_require_grad"] and r["grads_finite"], r
    assert r["losses"][-1] < r["losses"][0], r
    assert {"config.json", "model.safetensors", "modeling_dogma.py", "configuration_dogma.py"} <= set(
        r["saved_files"]
    ), r
    assert any(f.startswith("dogma_") for f in r["saved_files"]), r
    assert r["roundtrip_diff"] <= 1e-6 * scale, r


# -- through the library, every block kind ------------------------------------------------
def export_hf_phenotype(genome: Genome, directory: Path, seed: int = 0) -> dict[str, Any]:
    """What `evolve export --format hf` writes for the check: the directory and an example
    (`perturbed_example`), checked through transformers in this process."""
    from dogma_evolve.evolution.export.hf import check_hf

    model, ids, expected = perturbed_example(genome, directory, seed)
    info = write_hf(model, genome, directory)
    check_hf(directory, ids, expected)  # what export_individual does, in-process
    return info


@needs_transformers
def test_hf_exports_of_every_block_kind_load_generate_and_train_without_the_project(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    dirs, kinds, tied = [], set(), {}
    for name, make in GENOMES.items():
        info = export_hf_phenotype(make(), tmp_path / name)
        dirs.append(tmp_path / name)
        kinds |= set(info["kinds"])
        tied[name] = info["tied"]
    assert kinds == set(REGISTRY), f"kinds no export covers: {sorted(set(REGISTRY) - kinds)}"
    assert tied["catalogue"] and not tied["attention-gpt2"]  # the shared region's weights, once
    results = check_in_fresh_interpreter(dirs, tmp_path)
    for d in dirs:
        assert_hf_model_works(results[str(d)])


def test_flat_modules_import_each_other_by_their_flat_names(tmp_path):
    info = write_hf(decode(GENOMES["ssm-mamba"]()), GENOMES["ssm-mamba"](), tmp_path)
    assert {"dogma_blocks_ssm", "dogma_kernels_selective_scan_reference"} <= set(info["modules"])
    text = "\n".join(p.read_text() for p in tmp_path.glob("dogma_*.py"))
    assert "from .dogma_blocks_base import" in text
    assert "from . import dogma_kernels as kernels" in text  # a module bound as a module
    assert "phenotype" not in {line.split()[1] for line in text.splitlines() if line.startswith("from ")}
    # flat: transformers copies a remote-code model's top-level modules only
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_dogma.DogmaForCausalLM"
    assert config["dogma"]["model"]["class"] == "config:ModelConfig"


# -- through the command line --------------------------------------------------------------
def evolve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dogma_evolve.evolution.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.slow
@needs_transformers
def test_cli_export_hf_writes_a_transformers_directory(tmp_path):
    import os

    store = f"sqlite:///{tmp_path / 'run.db'}"
    # the initial population alone, its best not re-trained under more seeds: 4 trainings
    run = ["--population", "4", "--generations", "0", "--steps", "5", "--min-steps", "0", "--confirm", "1"]
    proc = evolve("run", *run, "--workers", "1", "--seed", "3", "--quiet", "--store", store)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "best-hf"
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    proc = evolve("export", "--best", "--format", "hf", "-o", str(out), "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["format"] == "hf" and info["package_kinds"]
    files = set(info["files"])
    assert {"config.json", "model.safetensors", "modeling_dogma.py", "README.md", "genome.yaml"} <= files
    assert "example.safetensors" in files and "generation_config.json" in files
    assert "dogma_model" not in files and "model.pt2" not in files
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert f"Individual {info['id']} of run" in card and "## Lineage" in card and "## Metrics" in card
    assert json.loads((out / "config.json").read_text())["dogma"]["genome_id"] == info["genome_id"]
    [r] = check_in_fresh_interpreter([out], tmp_path).values()
    assert_hf_model_works(r)


def test_format_hf_without_transformers_is_refused_in_one_line(tmp_path):
    code = (
        "import sys; sys.modules['transformers'] = None\n"  # what an install without the extra sees
        "from dogma_evolve.evolution.cli.main import main\n"
        f"sys.exit(main(['export', '--best', '--format', 'hf', '-o', {str(tmp_path / 'out')!r},"
        f" '--store', {'sqlite:///' + str(tmp_path / 'none.db')!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "transformers" in proc.stderr and "hf" in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "none.db").exists()
