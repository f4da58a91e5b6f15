"""Fair training across candidates: the learning-rate rule by width and the compute budget.

**Learning rate by width** (μP-style for Adam: the update size of a hidden matrix scales
as lr · width, so lr ∝ 1/width keeps it width-independent)::

    lr(d_model) = BASE_LR · BASE_WIDTH / d_model

``BASE_LR`` was chosen at ``BASE_WIDTH`` = 64 by a sweep on the default suite (see
``evaluation/tasks/suite.py``); a width-32 candidate trains at 2·BASE_LR, a width-128 one
at BASE_LR / 2. Every candidate sees the same tokens (same batch size, same data stream
for a given seed).

**Training compute** of one step, the usual ≈ 6·N·D with the sequence mixer's own term:
the forward pass costs ``flops_per_token`` per token (``phenotype.account``: 2 FLOPs per
weight plus the mixer's T-dependent work, e.g. attention's T×T square), and the backward
pass twice that, so

    train_flops(step) = 3 · flops_per_token · batch_size · seq_len.

Under ``budget="flops"`` every candidate trains for the same total compute: its steps are
``round(total / train_flops(step))``, at least ``MIN_STEPS``.
"""

from __future__ import annotations

BASE_LR = 1e-2
BASE_WIDTH = 64
MIN_LR, MAX_LR = 1e-4, 3e-2
MIN_STEPS = 10
BUDGETS = ("steps", "flops")


def learning_rate(d_model: int, base_lr: float = BASE_LR, base_width: int = BASE_WIDTH) -> float:
    """Peak AdamW learning rate for a model of width ``d_model`` (clamped to [MIN_LR, MAX_LR])."""
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    return min(MAX_LR, max(MIN_LR, base_lr * base_width / d_model))


def step_flops(flops_per_token: float, batch_size: int, seq_len: int) -> float:
    """Training FLOPs of one optimiser step: forward + backward ≈ 3 × forward."""
    return 3.0 * flops_per_token * batch_size * seq_len


def training_flops(flops_per_token: float, steps: int, batch_size: int, seq_len: int) -> float:
    """Training FLOPs of ``steps`` steps (≈ 6·N·D plus the sequence mixer's term)."""
    return steps * step_flops(flops_per_token, batch_size, seq_len)


def steps_for_flops(total_flops: float, flops_per_token: float, batch_size: int, seq_len: int) -> int:
    """Steps that spend ``total_flops`` on a model of ``flops_per_token`` (at least MIN_STEPS)."""
    if total_flops <= 0 or flops_per_token <= 0:
        raise ValueError("total_flops and flops_per_token must be positive")
    return max(MIN_STEPS, round(total_flops / step_flops(flops_per_token, batch_size, seq_len)))
