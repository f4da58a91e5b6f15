"""`make gpu-check`: the GPU path in one command, one table, a non-zero exit on any mismatch.

    python benchmarks/gpu_check.py [--run-seconds 120] [--peak-tflops T] [--dry-run]

Rows (``benchmarks/gpu_check_kernels.py`` for the kernel rows' tolerances and timing):

1. every sequence kernel and every fast backend it offers (found at run time from
   ``kernels._dispatch.BACKENDS``: ``triton`` fused-recurrent, ``chunk`` where an op has a
   chunked kernel) against a float64 reference at training shapes, float32 and bfloat16
   inputs; forward and forward + backward time and the speed-up over the PyTorch reference,
   whose own row carries its times. The selective scan at (batch 8, dim 2048, state 16,
   length 4096); the gated recurrence at the same batch, length and width (16 heads of 128);
   wkv at (8, 4096, 2048);
2. mamba-ssm's CUDA selective scan and fla's chunked simple-GLA at the same shapes, where they
   import (nothing is installed; the row says "not installed" otherwise), checked against the
   same reference for information;
3. an ``evolve run`` on this GPU for ``--run-seconds`` (default 120 s, so the whole check
   stays within 5 minutes; ``--run-seconds 300`` gives the issue's five-minute run):
   candidates finished per hour (its leases marked done, over the wall time from launch,
   Ray's start included) and the largest trained candidate's model FLOPs utilisation, MFU =
   ``train_flops`` / its compute time (``train_tokens / train_tokens_per_s``: forward, backward
   and update, scoring excluded) / the GPU's dense bf16 peak;
4. a ~100M-parameter candidate (Llama-style, width 768, on byte-level text of 1024 tokens)
   trained by ``evaluation.trainer.train`` in bf16: its MFU, against the issue's 30 % target.

Only row 1 (and a run that trains nothing) can fail the check: MFU below target is reported,
not a mismatch. Peaks: H100/H200 989 TFLOP/s, A100 312 TFLOP/s dense bf16; other GPUs need
``--peak-tflops`` for an MFU. Without CUDA it prints one line and exits 0; ``--dry-run`` runs
every row at tiny shapes on CPU (Triton in its interpreter), which is what CI tests.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The repository before this folder: benchmarks/kernels.py must not hide the kernels package
# (this folder stays on the path, after it, for gpu_check_kernels).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0}
MFU_TARGET = 0.30
Row = tuple[str, str, str, str, str, str, str]  # check, variant, shape, accuracy, time, result, status
HEADER: Row = (
    "check",
    "backend",
    "shape",
    "error out/grad (fp32 | bf16)",
    "fwd | fwd+bwd ms",
    "result",
    "status",
)


@dataclass
class Settings:
    device: Any  # torch.device
    dry_run: bool
    run_seconds: float
    peak_flops: float | None  # dense bf16 FLOP/s of the device; None: unknown
    warmup: int
    repeats: int


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="every row at tiny shapes on CPU")
    parser.add_argument("--run-seconds", type=float, default=120.0, help="evolve run budget (120)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check needs CUDA and sees no GPU: nothing checked (--dry-run runs it on CPU)")
        return 0
    device = torch.device("cpu" if args.dry_run else "cuda")
    peak = args.peak_tflops
    if peak is None and device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    settings = Settings(
        device=device,
        dry_run=args.dry_run,
        run_seconds=args.run_seconds,
        peak_flops=None if peak is None else peak * 1e12,
        warmup=0 if args.dry_run else 3,  # the dry run times the Triton interpreter: once
        repeats=1 if args.dry_run else 10,
    )
    rows: list[Row] = []
    rows += kernel_rows(settings)
    rows += evolve_run_rows(settings)
    rows += mfu_rows(settings)
    print_table(rows, settings)
    return 1 if any(row[-1] == "FAIL" for row in rows) else 0


# -- kernels ----------------------------------------------------------------------------------


def kernel_rows(settings: Settings) -> list[Row]:
    import torch
    from gpu_check_kernels import (
        DRY,
        FULL,
        OPS,
        TOLERANCES,
        external_chunk_gla,
        external_selective_scan,
        on,
        reference,
        timings,
    )

    device, shapes = settings.device, DRY if settings.dry_run else FULL
    externals = {
        "selective_scan": ("mamba-ssm", external_selective_scan),
        "gated_linear_recurrence": ("fla", external_chunk_gla),
    }
    rows: list[Row] = []
    for op in OPS:
        base = op.make(shapes, torch.Generator().manual_seed(0))
        inputs = {dtype: on(base, device, dtype) for dtype in TOLERANCES}
        split = 1 if settings.dry_run else 2  # batch rows per reference call; a dry run splits too
        refs = {dtype: reference(op, inputs[dtype], split) for dtype in TOLERANCES}
        ref_ms = timings(op, inputs[torch.float32], "torch", device, 1, max(1, settings.repeats // 3))
        rows.append(
            (op.name, "torch (reference)", op.shape(shapes), "float64 reference", _ms(ref_ms), "1.0x", "ref")
        )
        candidates: list[tuple[str, Any]] = [(b, op.run) for b in _backends(op, device, settings.dry_run)]
        if op.name in externals and device.type == "cuda":
            label, make = externals[op.name]
            external = make()
            if isinstance(external, str):
                rows.append((op.name, label, op.shape(shapes), "-", "-", external, "-"))
            else:
                candidates.append((label, external))
        for backend, run in candidates:
            rows.append(_kernel_row(op, backend, run, inputs, refs, ref_ms, shapes, settings))
            torch.cuda.empty_cache() if device.type == "cuda" else None
        del inputs, refs
    return rows


def _backends(op: Any, device: Any, dry_run: bool) -> list[str]:
    from gpu_check_kernels import DRY, TINY, backends_of

    return backends_of(op, device, DRY if dry_run else TINY)


def _kernel_row(
    op: Any,
    backend: str,
    run: Any,
    inputs: Any,
    refs: Any,
    ref_ms: tuple[float, float],
    shapes: Any,
    settings: Settings,
) -> Row:
    from dataclasses import replace

    import torch
    from gpu_check_kernels import TOLERANCES, errors, timings

    external = backend in ("mamba-ssm", "fla")
    probe = replace(op, run=run)
    accuracy, failed = [], False
    try:
        for dtype, (out_tol, grad_tol) in TOLERANCES.items():
            if external and dtype != torch.float32:
                continue
            out_err, grad_err = errors(probe, inputs[dtype], backend, refs[dtype])
            failed |= not (out_err <= out_tol and grad_err <= grad_tol)
            accuracy.append(f"{out_err:.1e}/{grad_err:.1e}")
        ms = timings(
            probe, inputs[torch.float32], backend, settings.device, settings.warmup, settings.repeats
        )
    except Exception as error:  # noqa: BLE001 - a backend that fails is a row, not a crash
        return (
            op.name,
            backend,
            op.shape(shapes),
            " | ".join(accuracy) or "-",
            "-",
            _short(error),
            "info" if external else "FAIL",
        )
    speed = f"{ref_ms[0] / ms[0]:.1f}x | {ref_ms[1] / ms[1]:.1f}x"
    status = "info" if external else ("FAIL" if failed else "ok")
    return (op.name, backend, op.shape(shapes), " | ".join(accuracy), _ms(ms), speed, status)


def _ms(ms: tuple[float, float]) -> str:
    return f"{ms[0]:.2f} | {ms[1]:.2f}"


def _short(error: BaseException, limit: int = 60) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- an evolve run ----------------------------------------------------------------------------


def evolve_run_rows(settings: Settings) -> list[Row]:
    """Launch ``evolve run`` for ``run_seconds`` (a dry run: two candidates of two steps, to
    the end), then read what it stored."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'gpu-check.db'}"
        command = [str(Path(sys.executable).with_name("evolve")), "run", "--store", url, "--quiet"]
        if settings.dry_run:
            command += [
                "--population",
                "2",
                "--generations",
                "0",
                "--steps",
                "2",
                "--min-steps",
                "0",
                "--confirm",  # two trainings: the best is not re-trained under more seeds
                "1",
                "--workers",
                "1",
            ]
        else:
            command += ["--population", "32", "--generations", "1000"]
        start = time.monotonic()
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        budget = 600.0 if settings.dry_run else settings.run_seconds
        try:
            _, stderr = process.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)  # the run stops between commits
            try:
                _, stderr = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                _, stderr = process.communicate()
        elapsed = time.monotonic() - start
        return [_run_row(url, elapsed, stderr, settings)]


def _run_row(url: str, elapsed: float, stderr: str, settings: Settings) -> Row:
    from dogma_evolve.store import Store

    label = f"{elapsed:.0f} s, {'dry run' if settings.dry_run else 'default search'}"
    try:
        store = Store(url, create=False)
    except Exception as error:  # noqa: BLE001
        return ("evolve run", "-", label, "-", "-", f"no store: {_last_line(stderr) or error}", "FAIL")
    try:
        runs = store.list_runs()
        if not runs:
            return ("evolve run", "-", label, "-", "-", f"no run: {_last_line(stderr)}", "FAIL")
        run_id = runs[0].id
        done = len(store.leases(run_id, "done"))
        trained = [
            e
            for ind in store.individuals(run_id)
            for e in ind.evaluations
            if "cached_from" not in e.metrics  # trained here, not copied from the cache
        ]
        rows = [e.metrics for e in trained if e.status == "ok" and e.metrics.get("train_flops")]
        statuses = Counter(e.status for e in trained)
    finally:
        store.close()
    if not rows:
        return (
            "evolve run",
            "-",
            label,
            "-",
            "-",
            f"{done} done, none trained: {_last_line(stderr)}",
            "FAIL",
        )
    largest = max(rows, key=lambda m: m.get("params", 0))
    compute_s = largest["train_tokens"] / max(largest["train_tokens_per_s"], 1e-9)
    flops_per_s = largest["train_flops"] / compute_s
    result = (
        f"{3600 * done / elapsed:.0f} candidates/h ({_counts(statuses)}); "
        f"largest {largest['params'] / 1e6:.2f}M params "
        f"({largest.get('precision', 'fp32')}): {_mfu(flops_per_s, settings)}"
    )
    share = f"{largest['gpu_share']:g} GPU" if "gpu_share" in largest else str(largest.get("device", "-"))
    return ("evolve run", share, label, "-", "-", result, "ok")


def _counts(statuses: Counter[str]) -> str:
    """``ok 12, oom 1`` of the committed evaluations, ok first."""
    return ", ".join(f"{s} {n}" for s, n in sorted(statuses.items(), key=lambda sn: (sn[0] != "ok", sn[0])))


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:80] if lines else ""


def _mfu(flops_per_s: float, settings: Settings) -> str:
    if settings.peak_flops is None:
        return f"{flops_per_s / 1e12:.3f} TFLOP/s (no peak known: MFU n/a)"
    return f"{flops_per_s / 1e12:.1f} TFLOP/s, MFU {100 * flops_per_s / settings.peak_flops:.1f} %"


# -- a 100M-parameter candidate ---------------------------------------------------------------


def mfu_rows(settings: Settings) -> list[Row]:
    """Train a Llama-style candidate of ~100M parameters in bf16 with the search's own
    trainer and report its MFU (a dry run: width 64, 2 layers, 64 tokens)."""
    import torch

    from dogma_evolve.evaluation import get_task, train
    from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
    from dogma_evolve.genome import Genome, preset
    from dogma_evolve.phenotype import account, decode

    width, seq_len, batch, steps = (64, 64, 4, 2) if settings.dry_run else (768, 1024, 32, 12)
    task = get_task("bytelm", seq_len=seq_len)
    pinned = {"vocab": task.vocab_size, "max_len": seq_len}
    base = preset("llama3-8b").to_dict()
    copies, genome = 1, None
    for copies in range(1, 64):
        genome = Genome.from_dict(_head_dim_64(scale_down(base, width, copies, pinned), width))
        if settings.dry_run and copies == 2 or account(genome, seq_len).params >= 100_000_000:
            break
    assert genome is not None
    accounting = account(genome, seq_len)
    shape = f"{accounting.params / 1e6:.3g}M params, d{width} x{copies}, B{batch} T{seq_len}"
    try:
        torch.manual_seed(0)
        model = decode(genome).to(settings.device)
        options = dict(batch_size=batch, lr=3e-4, precision="bf16", device=settings.device)
        train(model, task, 2, seed=0, **options)  # warm-up: kernels compiled, allocator primed
        stats = train(model, task, steps, seed=1, **options)
    except Exception as error:  # noqa: BLE001
        return [("100M candidate MFU", "bf16", shape, "-", "-", _short(error), "FAIL")]
    flops_per_s = 3 * accounting.flops_per_token * stats.tokens / stats.compute_seconds
    result = f"{stats.tokens_per_s:,.0f} tokens/s, {_mfu(flops_per_s, settings)}"
    status = "ok"
    if settings.peak_flops is not None and flops_per_s / settings.peak_flops < MFU_TARGET:
        status = f"below {MFU_TARGET:.0%}"
    step_ms = 1000 * stats.compute_seconds / max(1, stats.steps)
    return [("100M candidate MFU", "bf16", shape, "-", f"{step_ms:.1f} per step", result, status)]


def _head_dim_64(doc: dict[str, Any], width: int) -> dict[str, Any]:
    """Attention heads of 64 (scale_down keeps Llama's 32 heads: 24 wide at width 768, which
    the fused attention kernels run far below their speed), 4 queries per key-value head."""
    for region in doc["regions"]:
        for base in region.get("bases", []):
            if base["kind"] == "attention":
                heads = max(1, width // 64)
                base["params"].update(heads=heads, kv_heads=max(1, heads // 4), head_dim=width // heads)
    return doc


# -- the table --------------------------------------------------------------------------------


def print_table(rows: list[Row], settings: Settings) -> None:
    import torch

    where = "CPU, tiny shapes (dry run)" if settings.dry_run else torch.cuda.get_device_name(settings.device)
    widths = [max(len(str(row[i])) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    line = "  ".join("-" * w for w in widths)
    print(f"gpu-check on {where}; torch {torch.__version__}")
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)))
    print(line)
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print(line)
    failed = sum(row[-1] == "FAIL" for row in rows)
    print(f"{failed} mismatch{'es' * (failed != 1)}" if failed else "no mismatch")


if __name__ == "__main__":
    sys.exit(main())
