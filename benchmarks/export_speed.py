"""Does an exported model keep the project's training speed? Tokens/s of a user's own loop on
an export against the project's trainer on the same design, one process, one thread, fp32.

For each design (a genome at width ``--width``) this prints the tokens/s of

- **trainer**: `evaluation.trainer.train` on the decoded phenotype, as a candidate trains;
- **plain, phenotype**: `plain_loop_tokens_per_s` (below) on the decoded phenotype;
- **plain, export**: the same loop on the standalone package `evolve export` writes
  (`dogma_model/`, written and checked as the export does: `phenotype.standalone.writer`),
  loaded from its directory with `dogma_model.load()`;
- **plain, export (reference kernels)**: the same package under its kernels'
  `reference_only()`, which is what exports carried before they carried the fast paths;
- **plain, HF**: the loop on the Hugging Face directory (`evolve export --format hf`), loaded
  with transformers (when it is installed);

and each plain loop's ratio to the trainer. Every number is the fastest of ``--repeats``
runs of ``--steps`` steps (as `timeit` reports: other processes' load only ever slows a run;
the reference-kernel runs take at most 10 steps, slow as they are), the runs of one design
interleaved; the process is warmed first (imports, the C++ kernels' build).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export_speed.py

`plain_loop_tokens_per_s` is the loop a user writes, and what `benchmarks/throughput.py` may
import: it touches nothing of the project's code but the task's batches.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dogma_evolve.evaluation.budget import learning_rate  # noqa: E402
from dogma_evolve.evaluation.tasks import Task, get_task  # noqa: E402
from dogma_evolve.evaluation.trainer import train  # noqa: E402
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down  # noqa: E402
from dogma_evolve.genome import PRESETS, Genome  # noqa: E402
from dogma_evolve.phenotype import account, decode  # noqa: E402
from dogma_evolve.phenotype.standalone.writer import PACKAGE, check_package, write_package  # noqa: E402

TASK = "text"  # the default fitness's text task, as benchmarks/throughput.py
IGNORE_INDEX = -100  # the tasks' unanswered positions (`evaluation.tasks.IGNORE_INDEX`)
DESIGNS = {  # name -> preset, or a genome file
    "mamba": "mamba-130m",
    "rwkv": "rwkv4-169m",
    "griffin (rg-lru)": "griffin",
    "gpt2 (attention)": "gpt2-small",
    "winner (mamba+mla+gru)": str(ROOT / "benchmarks" / "genomes" / "default_run_best.yaml"),
}


def plain_loop_tokens_per_s(
    model: torch.nn.Module | str | Path,
    task: Task,
    steps: int = 30,
    lr: float = 1e-3,
    precision: str = "fp32",
    *,
    batch_size: int | None = None,
    warmup: int = 0,
) -> float:
    """Tokens/s of a bare training loop, the one a user writes around an exported model.

    ``model``: an ``nn.Module`` mapping ids (B, T) to logits (B, T, V) (or to an output with
    ``.logits``, as a transformers model), or an export's directory (`load_export`). The loop:
    ``torch.optim.AdamW(model.parameters(), lr)`` (no decay groups, no schedule, no
    clipping), cross-entropy on the task's ``steps`` batches of ``batch_size`` sequences
    (default ``task.train_batch_size``; drawn from ``task.train_generator(0)`` before the
    clock starts), backward, step. ``precision`` "bf16" runs the forward pass under
    ``torch.autocast(dtype=torch.bfloat16)``, "fp32" without. ``warmup`` steps run first,
    untimed; the ``steps`` after them are timed whole (as the trainer times its steps). The
    model trains in place; tokens/s = steps · batch_size · seq_len / seconds. Nothing of the
    project's code runs but the task's batch drawing, before the clock.
    """
    module = load_export(model) if isinstance(model, str | Path) else model
    device = next(module.parameters()).device
    size = batch_size or task.train_batch_size
    gen = task.train_generator(0)
    batches = [task.batch(gen, size) for _ in range(warmup + steps)]
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    module.train()

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> None:
        inputs, targets = inputs.to(device), targets.to(device)
        with autocast:
            out = module(inputs)
        logits = out.logits if hasattr(out, "logits") else out
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for inputs, targets in batches[:warmup]:
        step(inputs, targets)
    _sync(device)
    tick = time.perf_counter()
    for inputs, targets in batches[warmup:]:
        step(inputs, targets)
    _sync(device)
    return steps * size * task.seq_len / (time.perf_counter() - tick)


def load_export(directory: str | Path) -> torch.nn.Module:
    """The model of an export's directory, loaded as a user would, without our packages: a
    Hugging Face directory (``modeling_dogma.py``) through transformers (Hugging Face's
    `kernels`, which it imports, must not be shadowed by this folder's `kernels.py`: run this
    file as a script, or import it with the project root on sys.path), else the standalone
    package (``DIR/dogma_model/`` or the package folder itself) imported under a private name
    and ``load()``-ed."""
    root = Path(directory)
    if (root / "modeling_dogma.py").is_file():
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging

        logging.disable_progress_bar()
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(str(root), trust_remote_code=True)
        return model
    package = _import_package(root if (root / "__init__.py").is_file() else root / PACKAGE)
    loaded: torch.nn.Module = package.load()
    return loaded


def _import_package(package: Path) -> Any:
    name = f"_dogma_model_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def reference_kernels(model: torch.nn.Module) -> Iterator[None]:
    """Run an exported package's model with its kernels' references (`reference_only()` of
    the package's copy of `kernels._dispatch`): what exports carried before the fast paths."""
    package = type(model).__module__.split(".")[0]
    dispatch = sys.modules.get(f"{package}.kernels._dispatch")
    if dispatch is None:  # no kernels imported yet: the first forward imports them
        with torch.no_grad():
            model(torch.zeros(1, 2, dtype=torch.long))
        dispatch = sys.modules.get(f"{package}.kernels._dispatch")
    with dispatch.reference_only() if dispatch is not None else contextlib.nullcontext():
        yield


def design(source: str, width: int, task: Task) -> Genome:
    """A preset scaled down to ``width`` with at most two copies per region (`scale_down`), or a
    genome file, pinned to the task's vocabulary and length."""
    if source.endswith(".yaml"):
        return Genome.from_yaml(Path(source).read_text())
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    doc = scale_down(PRESETS[source](), width, 2, pinned)
    for region in doc["regions"]:
        for base in region.get("bases", []):
            if base["kind"] == "rglru":  # its width is not a `hidden`: scale it here
                base["params"].update(width=2 * width, heads=2)
    return Genome.from_dict(doc)


def measure(genome: Genome, task: Task, steps: int, repeats: int, hf: bool) -> dict[str, float]:
    """The best tokens/s of each way to train ``genome`` over ``repeats`` runs (module
    docstring)."""
    lr = learning_rate(int(genome.structural["d_model"]))
    batch = task.train_batch_size
    with tempfile.TemporaryDirectory(prefix="export-speed-") as tmp:
        torch.manual_seed(0)
        phenotype = decode(genome).eval()
        ids = torch.randint(0, task.vocab_size, (2, task.seq_len))
        with torch.no_grad():
            expected = phenotype(ids)
        package = write_package(phenotype, genome, Path(tmp) / "standalone")["package"]
        check_package(package, ids, expected)  # what `evolve export` does before it keeps it
        # transformers caches a remote-code model's modules under its directory's name: two
        # directories of one name in one process would get the first one's model code
        hf_dir = Path(tmp) / f"hf-{genome.id[:12]}"
        if hf:
            from dogma_evolve.evolution.export.hf import check_hf
            from dogma_evolve.phenotype.standalone.hf import write_hf

            hf_dir.mkdir()
            write_hf(phenotype, genome, hf_dir)
            check_hf(hf_dir, ids, expected)

        def trainer() -> float:
            torch.manual_seed(0)
            return train(decode(genome), task, steps, 0, batch_size=batch, lr=lr).tokens_per_s

        def plain(load: Callable[[], torch.nn.Module], reference: bool = False) -> Callable[[], float]:
            def run() -> float:
                torch.manual_seed(0)
                model = load()
                if not reference:
                    return plain_loop_tokens_per_s(model, task, steps, lr, batch_size=batch)
                with reference_kernels(model):
                    return plain_loop_tokens_per_s(model, task, min(steps, 10), lr, batch_size=batch)

            return run

        ways: dict[str, Callable[[], float]] = {
            "trainer": trainer,
            "plain, phenotype": plain(lambda: decode(genome)),
            "plain, export": plain(lambda: load_export(package)),
            "plain, export (reference kernels)": plain(lambda: load_export(package), reference=True),
        }
        if hf:
            ways["plain, HF"] = plain(lambda: load_export(hf_dir))
        runs: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(repeats):
            for way, run in ways.items():
                runs[way].append(run())
    return {way: max(values) for way, values in runs.items()}


def table(results: dict[str, dict[str, float]], params: dict[str, int]) -> str:
    ways = list(next(iter(results.values())))
    lines = [
        "| design | params (non-emb.) | " + " | ".join(f"{w} tok/s" for w in ways) + " |",
        "|" + " --- |" * (len(ways) + 2),
    ]
    for name, measured in results.items():
        trainer = measured["trainer"]
        cells = [
            f"{measured[w]:,.0f}" + ("" if w == "trainer" else f" ({measured[w] / trainer:.2f}×)")
            for w in ways
        ]
        lines.append(f"| {name} | {params[name]:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (30)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per way, interleaved; the fastest (3)")
    parser.add_argument("--width", type=int, default=64, help="d_model of the scaled-down presets (64)")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="comma-separated names of DESIGNS")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1, as a search's workers)")
    parser.add_argument("--no-hf", action="store_true", help="leave out the Hugging Face directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    task = get_task(TASK)
    hf = not args.no_hf and importlib.util.find_spec("transformers") is not None
    names = [n.strip() for n in args.designs.split(",") if n.strip()]
    genomes = {name: design(DESIGNS[name], args.width, task) for name in names}
    # warm the process: imports and the C++ kernels' build, which no design's first run should pay
    warm = next(iter(genomes.values()))
    train(decode(warm), task, 2, 0, batch_size=2, lr=1e-3)
    results, params = {}, {}
    for i, (name, genome) in enumerate(genomes.items(), 1):
        started = time.perf_counter()
        print(f"[{i}/{len(genomes)}] {name}", end="", file=sys.stderr, flush=True)
        params[name] = account(genome, task.seq_len).non_embedding_params
        results[name] = measure(genome, task, args.steps, args.repeats, hf)
        print(f" {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(
        f"{TASK}: {task.train_batch_size} x {task.seq_len} tokens a step, {args.steps} steps, fp32, "
        f"{torch.get_num_threads()} thread(s), best of {args.repeats}; (×) = tokens/s over the trainer's"
    )
    print(table(results, params))
    return 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    # run as a script, this folder leads sys.path, where benchmarks/kernels.py would shadow
    # Hugging Face's `kernels`, which transformers imports
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    raise SystemExit(main())
