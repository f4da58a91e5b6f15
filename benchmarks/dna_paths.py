"""Where the four-path DNA block spends its time: forward+backward per path, as a share of
the whole block, at a short and a long context (the profile issue 4 asks for before a kernel
is written for the strand-displacement path).

    python benchmarks/dna_paths.py [--width 128] [--batch 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

# Run as a script, this folder comes first on sys.path and its kernels.py would shadow the
# kernels package: put the repository root first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dogma_evolve.genome import Genome  # noqa: E402
from dogma_evolve.phenotype import decode  # noqa: E402


def _time(fn, x: torch.Tensor, repeats: int = 5) -> float:
    """Best-of wall seconds of forward + backward of fn(x)."""
    best = float("inf")
    for _ in range(repeats):
        x = x.detach().requires_grad_(True)
        start = time.perf_counter()
        fn(x).square().mean().backward()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    genome = Genome.from_dict(
        {
            "regions": [
                {"id": "s0", "type": "structural", "settings": {"d_model": args.width, "vocab": 64}},
                {"id": "c1", "type": "coding", "bases": [{"base": "T", "kind": "dna"}]},
            ]
        }
    )
    block = decode(genome).stages["c1"][0].mixer.train()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, width {args.width}, "
        f"batch {args.batch}; forward+backward, best of 5"
    )
    print(f"{'T':>6} {'path':<22} {'ms':>9} {'share of block':>15}")
    paths = {
        "A strand displacement": block._path_A,
        "B automaton": block._path_B,
        "C stochastic": block._path_C,
        "D double strand": block._path_D,
        "whole block": block.forward,
    }
    for length in (128, 1024):
        x = torch.randn(args.batch, length, args.width)
        total = _time(block.forward, x)
        for name, fn in paths.items():
            t = _time(fn, x)
            print(f"{length:>6} {name:<22} {t * 1e3:>9.2f} {t / total:>14.0%}")


if __name__ == "__main__":
    main()
