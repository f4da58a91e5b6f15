"""Fair training across candidates: the learning-rate rule by width and the compute budget.

**Learning rate by width** (μP-style for Adam: the update size of a hidden matrix scales
as lr · width, so lr ∝ 1/width keeps it width-independent)::

    lr(d_model) = BASE_LR · BASE_WIDTH / d_model

``BASE_LR`` was chosen at ``BASE_WIDTH`` = 64 by a sweep on the default suite (see
``evaluation/tasks/suite.py``); a width-32 candidate trains at 2·BASE_LR, a width-128 one
at BASE_LR / 2. Every candidate sees the same tokens (same batch size, same data stream
for a given seed).

**Training compute** of one step, the usual ≈ 6·N·D with the sequence mixer's own term.
``flops_per_token`` (``phenotype.account``) is the FORWARD pass per token: 2 FLOPs (a
multiply and an add) per weight a token's activations are multiplied by, so 2·N with N
the weights of every linear layer, convolution and the output head (an embedding look-up
costs none), plus the mixer's T-dependent work (attention's scores and values over the
full T×T square, 4·T·heads·head_dim per layer; the scans' declared elementwise work). The backward
pass of a product ``Y = X·W`` is two products of the same size, ``dX = dY·Wᵀ`` and
``dW = Xᵀ·dY``, so it costs 2× the forward, and the same holds for attention's two
products; forward + backward = 3 × forward, hence

    train_flops(step) = 3 · flops_per_token · batch_size · seq_len,

which is 3 · 2·N = 6·N FLOPs per token (6·N·D over D tokens) plus 3× the mixer's term.
Not counted, as in the 6·N·D rule: norms, activations, softmax, the loss, the
embeddings' gradient and the optimiser's update (O(N) per step, not per token); the
causal mask's unused half of the T×T square IS counted, as a FLOP counter counts it.

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
