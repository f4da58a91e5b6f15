"""Zero-cost proxies checked against stored results: do they say anything a surrogate lacks?

Issue 20 allows zero-cost features (one forward/backward pass at initialisation) only as
surrogate inputs, and only after checking them against stored results. This is that check.
For every genome with a successful full-fidelity evaluation of `--task` in the given stores
(mean quality over its stored seeds), the genome is decoded and initialised under a seed of
its own (`derive_seed("zero-cost", genome id)`), and one training batch of the task (batch
`task.train_batch_size`, generator seed 0, the same batch for every genome) gives:

- `init_loss`: the answer loss L at initialisation (`evaluation.trainer.answer_loss`);
- `grad_norm`: ‖∇_θ L‖₂ over all parameters (Abdelfattah et al. 2021, "Zero-cost proxies
  for lightweight NAS": grad_norm);
- `snip`: Σ_θ |θ ⊙ ∇_θ L| (the same paper's SNIP saliency summed over the network);
- `log_params`: log of the parameter count, the proxy every other one must beat.

Then two questions, on the same rows:

1. **Rank correlation** of each proxy with the stored quality: Spearman's ρ with its 95 %
   bootstrap interval over genomes (`--boot` resamples) and Kendall's τ-b, as the fidelity
   transfer measures them (`evaluation.transfer.rank_transfer`).
2. **What it adds to the surrogate**: `evolution.surrogate.Surrogate` (the search's forest)
   fitted on the DOGMA space's features (`dogma_features`) alone and on them plus the proxies,
   scored by the Spearman ρ of its held-out predictions under K-fold cross-validation (`--folds`, repeated
   `--repeats` times with shuffled folds; the same folds for both); the verdict is the paired
   difference over the folds (mean ± SE, paired t, sign-flip p; `benchmarks.search_stats`).
   The folds are not independent draws (they share training rows), so its SE is optimistic;
   read a small lead as none.

Stores are only read. A genome that fails to build or gives a non-finite loss is skipped
and counted. Proxies are computed in float32 on the CPU, one genome at a time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/zero_cost.py --store sqlite:///runs/a.db \
        --store sqlite:///runs/b.db [--task suite --steps 300 --json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import search_stats  # noqa: E402
from dogma_evolve.evaluation.evaluate import build_from_genome  # noqa: E402
from dogma_evolve.evaluation.tasks import derive_seed, get_task  # noqa: E402
from dogma_evolve.evaluation.tasks.base import Task  # noqa: E402
from dogma_evolve.evaluation.trainer import answer_loss  # noqa: E402
from dogma_evolve.evaluation.transfer import rank_transfer, spearman  # noqa: E402
from dogma_evolve.evolution.assisted import scored_by_genome  # noqa: E402
from dogma_evolve.evolution.spaces.dogma.features import dogma_features  # noqa: E402
from dogma_evolve.evolution.surrogate import Surrogate  # noqa: E402
from dogma_evolve.genome import Genome  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

PROXIES = ("init_loss", "grad_norm", "snip", "log_params")
ALL = 1_000_000  # evaluations read per store: every one a store of benchmark runs holds


def proxies(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """The zero-cost proxies of one initialised model on one batch (module docstring).
    inputs, targets: (B, T) token ids, targets IGNORE_INDEX off the answer positions."""
    model.train()
    model.zero_grad(set_to_none=True)
    loss = answer_loss(model(inputs), targets)
    loss.backward()
    grad_sq, snip, n = 0.0, 0.0, 0
    for p in model.parameters():
        n += p.numel()
        if p.grad is not None:
            grad_sq += float(p.grad.double().pow(2).sum())
            snip += float((p.detach().double() * p.grad.double()).abs().sum())
    return {
        "init_loss": float(loss.detach()),
        "grad_norm": math.sqrt(grad_sq),
        "snip": snip,
        "log_params": math.log(max(n, 1)),
    }


def stored_rows(urls: Sequence[str], task: str, steps: int) -> list[tuple[str, str, float]]:
    """(genome id, YAML, mean quality over its stored seeds) of every genome with a successful
    evaluation of `task` at `steps` in any of the stores."""
    by_genome: dict[str, tuple[str, list[float]]] = {}
    for url in urls:
        with Store(url) as store:
            for genome_id, (text, qualities) in scored_by_genome(store, task, steps, limit=ALL).items():
                by_genome.setdefault(genome_id, (text, []))[1].extend(qualities)
    return [(gid, text, float(np.mean(qs))) for gid, (text, qs) in sorted(by_genome.items())]


def measure(rows: Sequence[tuple[str, str, float]], task: Task) -> tuple[list[dict[str, Any]], int]:
    """Each row's proxies (with its id, YAML and quality), and how many were skipped."""
    inputs, targets = task.batch(task.train_generator(0), task.train_batch_size)
    out: list[dict[str, Any]] = []
    skipped = 0
    for genome_id, text, quality in rows:
        torch.manual_seed(derive_seed("zero-cost", genome_id))
        try:
            model = build_from_genome(text)[0]
            values = proxies(model, inputs, targets)
        except (ValueError, RuntimeError):
            skipped += 1
            continue
        if not all(math.isfinite(v) for v in values.values()):
            skipped += 1
            continue
        out.append({"genome_id": genome_id, "yaml": text, "quality": quality, **values})
    return out, skipped


def held_out_rho(
    features: Sequence[dict[str, float]], quality: Sequence[float], folds: int, repeats: int, seed: int = 0
) -> list[float]:
    """Spearman ρ of the surrogate's held-out predictions, one value per fold and repeat."""
    n = len(quality)
    out: list[float] = []
    for r in range(repeats):
        order = list(range(n))
        random.Random(derive_seed("zero-cost folds", seed, r)).shuffle(order)
        for k in range(folds):
            test = order[k::folds]
            held = set(test)
            train = [i for i in order if i not in held]
            surrogate = Surrogate(seed=derive_seed("zero-cost", seed, r, k)).fit(
                [(features[i], quality[i]) for i in train]
            )
            mean, _ = surrogate.predict([features[i] for i in test])
            out.append(spearman(list(mean), [quality[i] for i in test]))
    return out


def report(
    rows: Sequence[dict[str, Any]], seq_len: int, folds: int, repeats: int, boot: int
) -> dict[str, Any]:
    """Both checks over the measured rows (module docstring), as a JSON-ready dict."""
    quality = [r["quality"] for r in rows]
    correlation = {}
    for name in PROXIES:
        t = rank_transfer([r[name] for r in rows], quality, resamples=boot)
        correlation[name] = {
            "rho": t.spearman,
            "low": t.spearman_low,
            "high": t.spearman_high,
            "kendall": t.kendall,
        }
    base = [dogma_features(Genome.from_yaml(r["yaml"]), seq_len) for r in rows]
    with_proxies = [{**f, **{f"zc:{p}": r[p] for p in PROXIES}} for f, r in zip(base, rows, strict=True)]
    alone = held_out_rho(base, quality, folds, repeats)
    added = held_out_rho(with_proxies, quality, folds, repeats)
    verdict = search_stats.paired(added, alone)
    return {
        "genomes": len(rows),
        "correlation": correlation,
        "surrogate": {
            "features": search_stats.mean_se(alone),
            "features+proxies": search_stats.mean_se(added),
            "difference": {
                "mean": verdict.mean,
                "se": verdict.se,
                "t_p": verdict.p_t,
                "flip_p": verdict.p_perm,
            },
            "folds": folds,
            "repeats": repeats,
        },
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", action="append", required=True, help="a store URL (repeat for several)")
    parser.add_argument("--task", default="suite")
    parser.add_argument(
        "--steps", type=int, default=300, help="the full fidelity whose qualities are read (300)"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples of each ρ (1000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(1)
    rows = stored_rows(args.store, args.task, args.steps)
    if len(rows) < 2 * args.folds:
        parser.error(f"{len(rows)} stored genomes of {args.task!r} at {args.steps} steps: too few to check")
    task = get_task(args.task)
    measured, skipped = measure(rows, task)
    result = report(measured, task.seq_len, args.folds, args.repeats, args.boot)
    result["skipped"] = skipped
    result["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(result))
        return result
    print(f"{result['genomes']} genomes of {args.task} at {args.steps} steps ({skipped} skipped)")
    print(f"{'proxy':<12}{'Spearman ρ with quality [95 %]':>34}{'Kendall τ':>11}")
    for name, c in result["correlation"].items():
        interval = f"[{_signed(c['low'])}, {_signed(c['high'])}]"
        print(f"{name:<12}{_signed(c['rho']):>10}  {interval}{_signed(c['kendall']):>11}")
    s = result["surrogate"]
    (alone, alone_se), (added, added_se), d = s["features"], s["features+proxies"], s["difference"]
    print(
        f"surrogate, held-out ρ over {args.folds} folds x {args.repeats}: features {alone:+.3f} ± "
        f"{alone_se:.3f}; + proxies {added:+.3f} ± {added_se:.3f}; difference {d['mean']:+.3f} ± "
        f"{d['se']:.3f} (t p {d['t_p']:.3g}, sign-flip p {d['flip_p']:.3g})"
    )
    print(f"{result['seconds']:.0f} s")
    return result


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


if __name__ == "__main__":
    main()
