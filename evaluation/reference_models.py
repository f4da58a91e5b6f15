"""Yardstick models for calibrating tasks: a tiny causal transformer and an MLP-only model.

They are not candidates. A task is well posed at a budget when ``TinyAttentionLM`` learns
it clearly above chance while ``MLPOnlyLM`` (no sequence mixing) cannot; the tests and
``python -m dogma_evolve.evaluation.reference_models`` check exactly that.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class _CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class _Block(nn.Module):
    def __init__(self, width: int, heads: int | None) -> None:
        super().__init__()
        self.mix_norm = nn.LayerNorm(width) if heads else None
        self.mix = _CausalSelfAttention(width, heads) if heads else None
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mix is not None and self.mix_norm is not None:
            x = x + self.mix(self.mix_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyAttentionLM(nn.Module):
    """Pre-norm causal transformer with learned positions. ids (B, T) -> logits (B, T, V)."""

    def __init__(
        self, vocab_size: int, max_len: int, width: int = 64, heads: int = 4, layers: int = 2
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.randn(max_len, width) * 0.02)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class MLPOnlyLM(TinyAttentionLM):
    """The same stack with the attention removed: each position sees only its own token."""

    def __init__(self, vocab_size: int, max_len: int, width: int = 64, layers: int = 2) -> None:
        super().__init__(vocab_size, max_len, width, heads=4, layers=layers)
        self.blocks = nn.ModuleList(_Block(width, None) for _ in range(layers))


def calibrate(
    task_name: str = "mqar", steps: int | None = None, seed: int = 0, **overrides: Any
) -> dict[str, dict[str, float]]:
    """Train both yardsticks on one thread; return {model: metrics}."""
    from .evaluate import DEFAULT_STEPS
    from .tasks import get_task
    from .trainer import train_and_score

    torch.set_num_threads(1)
    task = get_task(task_name, **overrides)
    steps = steps or DEFAULT_STEPS
    report: dict[str, dict[str, float]] = {}
    for name, cls in (("attention", TinyAttentionLM), ("mlp_only", MLPOnlyLM)):
        torch.manual_seed(seed)
        model = cls(task.vocab_size, task.seq_len)
        report[name] = train_and_score(model, task, steps=steps, seed=seed)
    return report


if __name__ == "__main__":
    import sys

    for name, metrics in calibrate(sys.argv[1] if len(sys.argv) > 1 else "mqar").items():
        print(
            f"{name:10s} accuracy={metrics['accuracy']:.3f} (chance "
            f"{metrics['chance_accuracy']:.3f}) loss={metrics['loss']:.3f} "
            f"wall={metrics['wall_seconds']:.2f}s steps={metrics['steps']}"
        )
