"""The default fitness: the suite's mixture, its per-member scoring, and fair training."""

from __future__ import annotations

import math

import pytest
import torch

from dogma_evolve.evaluation import EvalRequest, evaluate, get_task
from dogma_evolve.evaluation.budget import (
    BASE_LR,
    BASE_WIDTH,
    MAX_LR,
    learning_rate,
    steps_for_flops,
    training_flops,
)
from dogma_evolve.evaluation.reference_models import TinyAttentionLM
from dogma_evolve.evaluation.tasks import IGNORE_INDEX
from dogma_evolve.evaluation.tasks.suite import MEMBERS, Suite, normalised_accuracy, score_components
from dogma_evolve.evaluation.trainer import score, train_and_score


def test_rows_cycle_through_members_in_disjoint_token_ranges():
    suite = get_task("suite")
    assert isinstance(suite, Suite) and suite.seq_len == 64
    inputs, targets = suite.batch(torch.Generator().manual_seed(3), 2 * len(MEMBERS) + 1)
    assert inputs.shape == targets.shape == (2 * len(MEMBERS) + 1, 64)
    bounds = [*suite.offsets, suite.vocab_size]
    members = []
    for row in range(inputs.shape[0]):
        lo = max(i for i, start in enumerate(suite.offsets) if start <= int(inputs[row, 0]))
        members.append(lo)
        assert bounds[lo] <= int(inputs[row].min()) and int(inputs[row].max()) < bounds[lo + 1]
        scored = targets[row][targets[row] != IGNORE_INDEX]
        assert len(scored) > 0
        assert bounds[lo] <= int(scored.min()) and int(scored.max()) < bounds[lo + 1]
    # consecutive rows hold consecutive members: every member is trained in every batch
    assert all((b - a) % len(MEMBERS) == 1 for a, b in zip(members, members[1:], strict=False))


def test_padding_is_never_scored_and_batches_follow_the_generator():
    suite = Suite()
    for i, member in enumerate(MEMBERS):
        x, y = suite.member_batch(i, torch.Generator().manual_seed(0), 4)
        assert (y[:, member.seq_len :] == IGNORE_INDEX).all()
        raw_x, _ = member.batch(torch.Generator().manual_seed(0), 4)
        assert torch.equal(x[:, : member.seq_len], raw_x + suite.offsets[i])
    small = suite.batch(torch.Generator().manual_seed(1), 2)  # fewer rows than members
    assert small[0].shape == (2, suite.seq_len)
    a = suite.batch(torch.Generator().manual_seed(5), 8)
    b = suite.batch(torch.Generator().manual_seed(5), 8)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_normalised_accuracy_maps_chance_to_zero_and_perfect_to_one():
    assert normalised_accuracy(0.25, 0.25) == 0.0
    assert normalised_accuracy(1.0, 0.25) == 1.0
    assert normalised_accuracy(0.625, 0.25) == pytest.approx(0.5)
    suite = Suite()
    perfect = score_components({m.name: 1.0 for m in MEMBERS}, suite)
    assert perfect["quality"] == pytest.approx(1.0)
    at_chance = score_components({m.name: m.chance_accuracy for m in MEMBERS}, suite)
    assert at_chance["quality"] == pytest.approx(0.0)
    assert set(at_chance["per_task"]) == {m.name for m in MEMBERS}


def test_score_reports_each_member_on_its_own_held_out_batches():
    suite = Suite()
    torch.manual_seed(0)
    model = TinyAttentionLM(suite.vocab_size, suite.seq_len, width=16, heads=2, layers=1)
    scored = score(model, suite, batch_size=4, eval_batches=4)
    assert set(scored.per_task) == {m.name for m in MEMBERS}
    assert scored.batches == 2 * len(MEMBERS)  # half the batches, for each member
    metrics = train_and_score(model, suite, steps=2, seed=0, batch_size=4, eval_batches=2)
    assert set(metrics["per_task"]) == set(scored.per_task)
    mean = sum(metrics["per_task"].values()) / len(MEMBERS)
    assert metrics["quality"] == pytest.approx(mean)


def test_a_plain_task_reports_its_normalised_accuracy_as_quality():
    task = get_task("mqar")
    torch.manual_seed(0)
    metrics = train_and_score(TinyAttentionLM(task.vocab_size, task.seq_len, width=16), task, 3, 0)
    expected = (metrics["accuracy"] - task.chance_accuracy) / (1 - task.chance_accuracy)
    assert metrics["quality"] == pytest.approx(expected)
    assert "per_task" not in metrics


def test_learning_rate_falls_as_one_over_width():
    assert learning_rate(BASE_WIDTH) == BASE_LR
    assert learning_rate(BASE_WIDTH // 2) == pytest.approx(2 * BASE_LR)
    assert learning_rate(2 * BASE_WIDTH) == pytest.approx(BASE_LR / 2)
    assert learning_rate(1) == MAX_LR  # clamped
    with pytest.raises(ValueError):
        learning_rate(0)


def _genome_yaml(d_model: int, vocab: int, max_len: int) -> str:
    from dogma_evolve.genome import Genome

    doc = {
        "regions": [
            {
                "id": "s0",
                "type": "structural",
                "settings": {"d_model": d_model, "vocab": vocab, "max_len": max_len},
            },
            {
                "id": "c1",
                "type": "coding",
                "bases": [{"base": "T", "kind": "attention"}, {"base": "A", "kind": "mlp"}],
            },
        ],
        "edges": [],
    }
    return Genome.from_dict(doc).to_yaml()


def test_evaluate_trains_each_width_at_the_rule_s_rate():
    task = get_task("mqar")
    for width in (32, 128):
        text = _genome_yaml(width, task.vocab_size, task.seq_len)
        result = evaluate(EvalRequest(genome_yaml=text, genome_id=f"w{width}", task="mqar", fidelity=2))
        assert result.status == "ok", result.reason
        assert result.metrics["lr"] == pytest.approx(learning_rate(width))


def test_a_flops_budget_gives_small_models_more_steps_for_the_same_compute():
    total = 1e12
    small = steps_for_flops(total, 1e5, batch_size=16, seq_len=64)
    large = steps_for_flops(total, 4e5, batch_size=16, seq_len=64)
    assert small == pytest.approx(4 * large, rel=0.01)
    for fpt, steps in ((1e5, small), (4e5, large)):
        assert math.isclose(training_flops(fpt, steps, 16, 64), total, rel_tol=0.01)


@pytest.mark.slow
def test_the_suite_separates_attention_from_mlp_only_at_the_default_budget():
    """Calibration, re-checked: at the default budget the scaled-down GPT-2 seed (attention)
    is far above the same genome with its attention removed, which stays at chance."""
    from dogma_evolve.evolution.engine import RunConfig
    from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
    from dogma_evolve.genome import PRESETS, Genome

    config = RunConfig(task="suite")
    suite = get_task(config.task)
    doc = scale_down(PRESETS["gpt2-small"](), 32, 1, {"vocab": suite.vocab_size, "max_len": suite.seq_len})
    mlp_only = {**doc, "regions": [dict(r) for r in doc["regions"]]}
    for region in mlp_only["regions"]:
        if region["type"] == "coding":
            region["bases"] = [b for b in region["bases"] if b["base"] != "T"]
    quality = {}
    for name, d in (("attention", doc), ("mlp_only", mlp_only)):
        genome = Genome.from_dict(d)
        request = EvalRequest(genome.to_yaml(), genome.id, config.task, config.steps, seed=0)
        result = evaluate(request)
        assert result.status == "ok", result.reason
        quality[name] = result.metrics["quality"]
    assert quality["mlp_only"] <= 0.05
    assert quality["attention"] >= quality["mlp_only"] + 0.2
