"""Every evaluation records the compute it trained: tokens and FLOPs by the accounting's rule."""

from __future__ import annotations

import pytest

from dogma_evolve.evaluation import EvalRequest, evaluate, get_task
from dogma_evolve.evaluation.budget import step_flops, training_flops
from dogma_evolve.evaluation.evaluate import compute_metrics
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account, decode
from tests.evaluation.eval_test_models import build

# an attention layer and a SwiGLU: the forward has a T-dependent (T x T) term besides 2N
GENOME = """
regions:
- {id: s0, type: structural, settings: {d_model: 32, vocab: 29, max_len: 15, positions: rope}}
- id: c1
  type: coding
  bases:
  - {base: T, kind: attention, params: {heads: 2}}
  - {base: A, kind: swiglu}
"""


def request(steps: int, **fields) -> EvalRequest:
    genome = Genome.from_yaml(GENOME)
    return EvalRequest(genome.to_yaml(), genome.id, "mqar", steps, seed=1, **fields)


@pytest.mark.parametrize(("steps", "batch"), [(3, None), (4, 8)])
def test_a_real_evaluation_records_its_tokens_and_flops(steps, batch):
    task = get_task("mqar")
    result = evaluate(request(steps, batch_size=batch))
    assert result.status == "ok", result.reason
    m = result.metrics
    B, T = batch or task.train_batch_size, task.seq_len
    assert m["steps"] == steps
    assert m["train_tokens"] == steps * B * T
    acct = account(Genome.from_yaml(GENOME), T)
    assert m["flops_per_token"] == acct.flops_per_token
    # the budget's model: 3 x forward per token, the forward 2·N plus the mixer's term
    assert m["train_flops"] == round(training_flops(acct.flops_per_token, steps, B, T))
    assert m["train_flops"] == round(steps * step_flops(acct.flops_per_token, B, T))
    assert m["train_flops"] == 3 * acct.flops_per_token * steps * B * T
    # = 6·N·D + 3 x attention's T x T term, N the weights tokens are multiplied by: every
    # matrix of the model (the embedding is the tied head's), counted on the built module
    n = sum(p.numel() for p in decode(Genome.from_yaml(GENOME)).parameters() if p.ndim == 2)
    D = m["train_tokens"]
    attention = 4 * T * 32  # scores and values over the full square, heads x head_dim = 32
    assert m["train_flops"] == 6 * n * D + 3 * attention * D
    assert isinstance(m["train_tokens"], int) and isinstance(m["train_flops"], int)


def test_a_failed_evaluation_records_no_compute():
    result = evaluate(
        EvalRequest("nan", "id-nan", "mqar", 3, seed=0),
        build,
    )
    assert result.status == "nan"
    assert "train_tokens" not in result.metrics and "train_flops" not in result.metrics


def test_without_an_accountant_only_tokens_are_recorded():
    result = evaluate(EvalRequest("tiny", "id-tiny", "mqar", 2, seed=0, batch_size=4), build)
    assert result.status == "ok", result.reason
    assert result.metrics["train_tokens"] == 2 * 4 * get_task("mqar").seq_len
    assert "train_flops" not in result.metrics


def test_compute_metrics_is_the_budget_formula():
    metrics = {"steps": 7, "flops_per_token": 1234}
    assert compute_metrics(metrics, 16, 64) == {
        "train_tokens": 7 * 16 * 64,
        "train_flops": 3 * 1234 * 7 * 16 * 64,
    }
    assert compute_metrics({"steps": 7}, 16, 64) == {"train_tokens": 7 * 16 * 64}
