"""Hand-designed baselines for the DOGMA search benchmark, with a learning-rate sweep.

Each preset (Llama-style Transformer++, GPT-2-style, Mamba, Jamba-style hybrid) is scaled
to the largest width (32..256 by 16) and depth (1..8 copies) whose parameter count is
under the budget, then trained at the full fidelity with the width rule's learning rate
times 0.5, 1 and 2 on the sweep seed (0). The sweep's best rate is trained again under
`RETRAIN_SEEDS` fresh seeds (`derive_seed("retrain-baseline", name, k)`), and the mean of
those is the baseline's score: the sweep's own best value carries the same winner's
curse an incumbent's does. Results are kept in a JSON file, so a rerun trains nothing.
"""

from __future__ import annotations

import json
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from dogma_evolve.evaluation import EvalRequest, evaluate, get_task
from dogma_evolve.evaluation.budget import learning_rate
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.genome import PRESETS, Genome, GenomeError
from dogma_evolve.phenotype import account

BASELINES = {
    "llama (Transformer++)": "llama3-8b",
    "gpt2": "gpt2-small",
    "mamba": "mamba-130m",
    "jamba": "jamba",
}
LR_SWEEP = (0.5, 1.0, 2.0)
SWEEP_SEED = 0
RETRAIN_SEEDS = 3


def baseline_genome(preset: str, max_params: int, pinned: dict[str, Any]) -> Genome:
    """The preset's architecture at the largest width and depth under `max_params`."""
    best: tuple[int, Genome] | None = None
    for width in range(32, 257, 16):
        for copies in range(1, 9):
            try:
                genome = Genome.from_dict(scale_down(PRESETS[preset](), width, copies, pinned))
            except GenomeError:
                continue
            params = account(genome).params
            if params <= max_params and (best is None or params > best[0]):
                best = (params, genome)
    if best is None:
        raise ValueError(f"no {preset} under {max_params} parameters")
    return best[1]


def train_baseline(job: tuple[str, float, int, dict[str, Any]]) -> dict[str, Any]:
    """One training of baseline `name` at `scale` x the width rule's rate under `seed`."""
    import torch

    name, scale, seed, shared = job
    torch.set_num_threads(1)
    config = RunConfig(**shared)
    task = get_task(config.task)
    genome = baseline_genome(
        BASELINES[name], config.max_params, {"vocab": task.vocab_size, "max_len": task.seq_len}
    )
    width = int(genome.to_dict()["regions"][0]["settings"]["d_model"])
    lr = scale * learning_rate(width)
    request = EvalRequest(genome.to_yaml(), genome.id, config.task, config.steps, seed=seed)
    result = evaluate(request, train_options={"lr": lr})
    return {
        "name": name,
        "scale": scale,
        "seed": seed,
        "lr": lr,
        "params": account(genome).params,
        "quality": quality_of(result.metrics) if result.status == "ok" else 0.0,
        "status": result.status,
    }


def fits(name: str, shared: dict[str, Any]) -> bool:
    """Whether baseline `name` has a size under the parameter budget (printed when not)."""
    config = RunConfig(**shared)
    task = get_task(config.task)
    try:
        baseline_genome(
            BASELINES[name], config.max_params, {"vocab": task.vocab_size, "max_len": task.seq_len}
        )
    except ValueError as error:
        print(f"baseline {name} left out: {error}")
        return False
    return True


def run_baselines(executor: Executor, shared: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """Every baseline's sweep and re-trained score (cached in `path`, keyed by settings);
    a baseline with no size under the budget is left out, with a printed line."""
    key = json.dumps(shared, sort_keys=True)
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("settings") == key:
            return list(cached["baselines"])
    names = [n for n in BASELINES if fits(n, shared)]
    sweep = list(executor.map(train_baseline, [(n, s, SWEEP_SEED, shared) for n in names for s in LR_SWEEP]))
    best = {n: max((r for r in sweep if r["name"] == n), key=lambda r: r["quality"]) for n in names}
    seeds = {n: [derive_seed("retrain-baseline", n, k) for k in range(RETRAIN_SEEDS)] for n in names}
    again = list(
        executor.map(train_baseline, [(n, best[n]["scale"], s, shared) for n in names for s in seeds[n]])
    )
    out = []
    for n in names:
        scores = [r["quality"] for r in again if r["name"] == n]
        out.append(
            {
                "name": n,
                "params": best[n]["params"],
                "lr": best[n]["lr"],
                "sweep": [r["quality"] for r in sweep if r["name"] == n],
                "seeds": seeds[n],
                "qualities": scores,
                "score": sum(scores) / len(scores),
            }
        )
    path.write_text(json.dumps({"settings": key, "baselines": out}, indent=1))
    return out


__all__ = ["BASELINES", "LR_SWEEP", "baseline_genome", "fits", "run_baselines", "train_baseline"]
