"""Training throughput against the machine's roofline, per candidate, in one run.

For each model this prints the tokens/s and the achieved FLOP/s (the project's accounting:
``3 · flops_per_token · tokens`` over the trainer's forward + backward + update seconds,
`evaluation.evaluate.compute_metrics`) of

- **the trainer**: `evaluation.trainer.train`, as a candidate of a search trains (the width
  rule's learning rate, the precision ``--precision`` resolves to on this machine);
- **a plain loop**: the same decoded module under a bare PyTorch loop (AdamW, cross-entropy,
  backward, step; no project code around the module: `benchmarks/export_speed.py`'s
  `plain_loop_tokens_per_s`), so the trainer's own overhead shows;

beside this machine's **GEMM roofline at the model's width**, measured in the same run:
``(tokens × d) @ (d × 4d)``, the shape of an MLP's first product at one training batch, best
of a few repeats, in float32 and in bfloat16. The headline is the trainer's FLOP/s as a
percentage of the float32 and the bfloat16 roofline at its width. On CUDA the same rows
report MFU against the card's dense bf16 peak (``--peak-tflops`` or a known card).

Models: the default initial population's first ``--population`` genomes (the engine's own
generation-0 draw at seed 0, `evolve run`'s defaults), and ladder shapes of four designs
(Llama-style, Mamba, GPT-2-style presets and the default run's best,
``benchmarks/genomes/default_run_best.yaml``) at ``--ladder-sizes`` non-embedding parameters
(`evolution.scale.ladder`, the rule `evolve scale` resizes by). Every model trains
``--steps`` steps from a fresh initialisation at the default fitness's batch (16 × 64 bytes).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/throughput.py --json throughput.json

Last, the **exported winner** (``--export``, on by default): the default run's best at the
search's size, written as `evolve export` writes it (the standalone package) and trained by
the same plain loop from its directory, beside the trainer on the same design
(`benchmarks/export_speed.py`'s ``measure``, best of ``--export-repeats`` interleaved runs).

Run it on a quiet machine, one thread (``OMP_NUM_THREADS=1``, as a search's workers train).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.export_speed import plain_loop_tokens_per_s  # noqa: E402
from dogma_evolve.evaluation.budget import learning_rate  # noqa: E402
from dogma_evolve.evaluation.precision import resolve_precision  # noqa: E402
from dogma_evolve.evaluation.tasks import Task, get_task  # noqa: E402
from dogma_evolve.evaluation.tasks.base import derive_seed  # noqa: E402
from dogma_evolve.evaluation.trainer import train  # noqa: E402
from dogma_evolve.genome import Genome, load_genome  # noqa: E402
from dogma_evolve.phenotype import account, decode  # noqa: E402

TASK = "text"
LADDER_DESIGNS = {
    "llama": "preset:llama3-8b",
    "mamba": "preset:mamba-130m",
    "gpt2": "preset:gpt2-small",
    "winner": str(ROOT / "benchmarks" / "genomes" / "default_run_best.yaml"),
}
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0}
GEMM_REPEATS = 20


@dataclass
class Row:
    """One model's measurements (module docstring); FLOP/s in GFLOP/s."""

    group: str
    name: str
    width: int
    params: int
    non_embedding: int
    precision: str
    trainer_tokens_s: float
    trainer_gflops: float
    plain_tokens_s: float
    roof_fp32: float
    roof_bf16: float

    @property
    def of_fp32(self) -> float:
        return self.trainer_gflops / self.roof_fp32

    @property
    def of_bf16(self) -> float:
        return self.trainer_gflops / self.roof_bf16

    @property
    def trainer_vs_plain(self) -> float:
        return self.trainer_tokens_s / self.plain_tokens_s


def gemm_gflops(width: int, dtype: torch.dtype, device: torch.device, tokens: int = 1024) -> float:
    """GFLOP/s of ``(tokens × width) @ (width × 4·width)`` in ``dtype`` on ``device``: the
    best of ``GEMM_REPEATS`` after two warm-ups (the roofline a candidate's products reach)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(tokens, width, generator=gen).to(device, dtype)
    b = torch.randn(width, 4 * width, generator=gen).to(device, dtype)
    best = float("inf")
    for i in range(GEMM_REPEATS + 2):
        _sync(device)
        tick = time.perf_counter()
        a @ b
        _sync(device)
        if i >= 2:
            best = min(best, time.perf_counter() - tick)
    return 2 * tokens * width * 4 * width / best / 1e9


def measure(
    group: str, name: str, genome: Genome, task: Task, steps: int, precision: str, device: torch.device
) -> Row:
    """Train ``genome`` ``steps`` steps in the trainer and in the plain loop (each from the
    same fresh initialisation) and measure both; the roofline at its width."""
    acc = account(genome, task.seq_len)
    width = int(genome.structural["d_model"])
    lr = learning_rate(width)
    torch.manual_seed(0)
    model = decode(genome).to(device)
    stats = train(model, task, steps, 0, batch_size=task.train_batch_size, lr=lr, precision=precision)
    flops = 3 * acc.flops_per_token * stats.tokens
    torch.manual_seed(0)
    plain = plain_loop_tokens_per_s(decode(genome).to(device), task, steps, lr, precision)
    return Row(
        group=group,
        name=name,
        width=width,
        params=acc.params,
        non_embedding=acc.non_embedding_params,
        precision=precision,
        trainer_tokens_s=stats.tokens_per_s,
        trainer_gflops=flops / stats.compute_seconds / 1e9,
        plain_tokens_s=plain,
        roof_fp32=_roofline(width, torch.float32, device),
        roof_bf16=_roofline(width, torch.bfloat16, device),
    )


_ROOFS: dict[tuple[int, torch.dtype, str], float] = {}


def _roofline(width: int, dtype: torch.dtype, device: torch.device) -> float:
    key = (width, dtype, device.type)
    if key not in _ROOFS:
        _ROOFS[key] = gemm_gflops(width, dtype, device)
    return _ROOFS[key]


def initial_population(size: int, seed: int = 0) -> list[tuple[str, Genome]]:
    """The first ``size`` genomes of generation 0 of `evolve run`'s defaults at ``seed``, as
    the engine draws them (`Engine._seeds`: the space's initial genomes, canonical, new and
    within the constraints)."""
    from dogma_evolve.evolution.config import RunConfig
    from dogma_evolve.evolution.spaces.registry import SPACES

    config = RunConfig(seed=seed)
    space = SPACES[config.space].from_config(config)
    rng = random.Random(derive_seed(config.seed, "generation", 0))
    out: list[tuple[str, Genome]] = []
    seen: set[str] = set()
    for g in space.initial(config.population, rng):
        g = space.canonical(g)
        if g.id not in seen and space.violation(g) is None:
            out.append((f"pop{len(out):02d} {g.id[:8]}", g))
            seen.add(g.id)
    return out[:size]


def ladder_shapes(sizes: list[float], task: Task) -> list[tuple[str, Genome]]:
    """Each ``LADDER_DESIGNS`` design at its shape (width and depth, `Design.shapes`) whose
    non-embedding count is nearest each of ``sizes`` in log N, as `evolution.scale.ladder`
    picks rungs (without its four-size minimum, which is for fitting a law)."""
    from dogma_evolve.evolution.scale.ladder import Design

    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    out = []
    for name, source in LADDER_DESIGNS.items():
        design = Design.of(load_genome(source), pinned, name, preset=source.startswith("preset:"))
        found: list[tuple[int, Genome]] = []
        for shape in design.shapes("both"):
            genome = design.genome(shape)
            if genome is not None:
                found.append((account(genome).non_embedding_params, genome))
                if found[-1][0] > 1.5 * max(sizes):
                    break
        for target in sizes:
            params, genome = min(found, key=lambda f: abs(math.log(f[0] / target)))
            out.append((f"{name} {params / 1e3:.0f}k", genome))
    return out


def table(rows: list[Row], header: dict[str, Any]) -> str:
    """The Markdown table results.md quotes, and the medians the targets are read from."""
    lines = [
        f"device: {header['device']}; precision: {header['precision']} ({header['probe']}); "
        f"{header['steps']} steps of {header['tokens_per_step']} tokens; threads {header['threads']}",
        "",
        "| model | d | params (non-emb.) | trainer tok/s | trainer GFLOP/s | plain loop tok/s "
        "| trainer / plain | fp32 roof | bf16 roof | % fp32 roof | % bf16 roof |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.width} | {r.params:,} ({r.non_embedding:,}) | {r.trainer_tokens_s:,.0f} "
            f"| {r.trainer_gflops:.1f} | {r.plain_tokens_s:,.0f} | {r.trainer_vs_plain:.2f} "
            f"| {r.roof_fp32:.0f} | {r.roof_bf16:.0f} | {100 * r.of_fp32:.0f} % | {100 * r.of_bf16:.1f} % |"
        )
    pop = [r for r in rows if r.group == "population"]
    if pop:
        roof96 = _ROOFS.get((96, torch.float32, header["device_type"]))
        med_tok = statistics.median(r.trainer_tokens_s for r in pop)
        med_gf = statistics.median(r.trainer_gflops for r in pop)
        lines += [
            "",
            f"population ({len(pop)}): median trainer {med_tok:,.0f} tokens/s, {med_gf:.1f} GFLOP/s"
            + (f" = {med_gf / roof96:.2f}x the fp32 GEMM at d = 96 ({roof96:.0f} GFLOP/s)" if roof96 else "")
            + f"; median trainer / plain loop {statistics.median(r.trainer_vs_plain for r in pop):.2f}",
        ]
    if header.get("peak_tflops"):
        lines.append(
            f"MFU against {header['peak_tflops']} TFLOP/s: "
            + ", ".join(
                f"{r.name} {100 * r.trainer_gflops / 1e3 / header['peak_tflops']:.2f} %" for r in rows
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps per model (40)")
    parser.add_argument("--population", type=int, default=16, help="initial-population genomes (16)")
    parser.add_argument(
        "--ladder-sizes", default="60k,250k,1M", help="non-embedding sizes of the ladder shapes ('' for none)"
    )
    parser.add_argument("--precision", default="auto", help="auto (resolved here), fp32 or bf16")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak")
    parser.add_argument("--json", type=Path, default=None, help="write the rows and the header here")
    parser.add_argument(
        "--export", action=argparse.BooleanOptionalAction, default=True, help="the exported winner's speed"
    )
    parser.add_argument("--export-repeats", type=int, default=3, help="interleaved runs, the best (3)")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = resolve_precision(args.precision, device.type)
    task = get_task(TASK)
    peak = args.peak_tflops
    if peak is None and device.type == "cuda":
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in torch.cuda.get_device_name()), None)
    header = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else _cpu_name(),
        "device_type": device.type,
        "precision": precision,
        "probe": _probe_reason(device, args.precision),
        "steps": args.steps,
        "tokens_per_step": task.train_batch_size * task.seq_len,
        "threads": torch.get_num_threads(),
        "peak_tflops": peak,
    }
    _roofline(96, torch.float32, device)  # the reference width of the population's target
    models = [("population", n, g) for n, g in initial_population(args.population)]
    if args.ladder_sizes:
        sizes = [_size(s) for s in args.ladder_sizes.split(",")]
        models += [("ladder", n, g) for n, g in ladder_shapes(sizes, task)]
    rows = []
    for i, (group, name, genome) in enumerate(models, 1):
        with _progress(f"[{i}/{len(models)}] {name}"):
            rows.append(measure(group, name, genome, task, args.steps, precision, device))
    print(table(rows, header))
    exported: dict[str, float] = {}
    if args.export:
        from benchmarks.export_speed import measure as export_measure

        with _progress("the exported winner"):
            winner = Genome.from_yaml(Path(LADDER_DESIGNS["winner"]).read_text())
            exported = export_measure(winner, task, args.steps, args.export_repeats, hf=False)
        trainer = exported["trainer"]
        print(
            f"\nthe default run's best, exported (standalone package), {args.steps} steps, best of "
            f"{args.export_repeats}: trainer {trainer:,.0f} tokens/s; "
            + "; ".join(
                f"{way} {v:,.0f} ({v / trainer:.2f}x)" for way, v in exported.items() if way != "trainer"
            )
        )
    if args.json is not None:
        payload = {"header": header, "rows": [asdict(r) for r in rows], "export": exported}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


@contextlib.contextmanager
def _progress(label: str) -> Any:
    started = time.perf_counter()
    print(label, end="", file=sys.stderr, flush=True)
    yield
    print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def _size(text: str) -> float:
    text = text.strip().lower()
    scale = {"k": 1e3, "m": 1e6}.get(text[-1:], 1.0)
    return float(text[:-1] if scale != 1.0 else text) * scale


def _probe_reason(device: torch.device, precision: str) -> str:
    """Why ``auto`` resolved as it did on this CPU; a checkout from before the probe (the
    "before" column of results.md runs this script against one) had ``auto`` = fp32."""
    if device.type != "cpu" or precision != "auto":
        return "as given"
    try:
        from dogma_evolve.evaluation.precision import cpu_probe
    except ImportError:
        return "auto is fp32 on a CPU in this checkout"
    return cpu_probe().reason


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({torch.backends.cpu.get_cpu_capability()})"
    return f"cpu ({torch.backends.cpu.get_cpu_capability()})"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    raise SystemExit(main())
