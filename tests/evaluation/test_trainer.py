"""The trainer: learns what attention can learn, is deterministic, honours the contracts."""

import math

import pytest
import torch
from torch import nn

from dogma_evolve.evaluation import DEFAULT_STEPS, EvaluationTimeout, get_task, score, train, train_and_score
from dogma_evolve.evaluation.reference_models import MLPOnlyLM, TinyAttentionLM
from dogma_evolve.evaluation.trainer import DEFAULT_BATCH_SIZE, Deadline, parameter_groups, warmup_cosine


def test_attention_learns_default_mqar_and_mlp_only_stays_near_chance():
    task = get_task("mqar")
    torch.manual_seed(0)
    attention = train_and_score(
        TinyAttentionLM(task.vocab_size, task.seq_len), task, steps=DEFAULT_STEPS, seed=0
    )
    torch.manual_seed(0)
    mlp_only = train_and_score(MLPOnlyLM(task.vocab_size, task.seq_len), task, steps=DEFAULT_STEPS, seed=0)
    chance = task.chance_accuracy
    assert attention["accuracy"] > max(0.5, 8 * chance), attention
    assert mlp_only["accuracy"] < 2.5 * chance, mlp_only
    assert attention["loss"] < mlp_only["loss"]
    print(f"attention {attention}\nmlp_only {mlp_only}")


def test_metrics_are_complete_and_finite():
    task = get_task("mqar")
    torch.manual_seed(0)
    metrics = train_and_score(TinyAttentionLM(task.vocab_size, task.seq_len), task, 5, seed=0)
    for name in (
        "loss",
        "accuracy",
        "train_loss",
        "train_tokens_per_s",
        "infer_latency_ms",
        "wall_seconds",
        "steps",
        "chance_accuracy",
    ):
        assert math.isfinite(metrics[name]), name
    assert metrics["steps"] == 5
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert metrics["train_tokens_per_s"] > 0 and metrics["infer_latency_ms"] > 0


def test_same_seed_same_metrics_other_seed_other_metrics():
    task = get_task("mqar")

    def run(seed):
        torch.manual_seed(seed)
        model = TinyAttentionLM(task.vocab_size, task.seq_len)
        return train_and_score(model, task, steps=15, seed=seed)

    a, b, c = run(1), run(1), run(2)
    for name in ("loss", "accuracy", "train_loss"):
        assert a[name] == b[name], name
    assert a["train_loss"] != c["train_loss"]


def test_train_then_score_gives_the_metrics_of_train_and_score():
    task = get_task("mqar")
    torch.manual_seed(0)
    model = TinyAttentionLM(task.vocab_size, task.seq_len)
    trained = train(model, task, 10, seed=3, lr=1e-3)
    scored = score(model, task)
    torch.manual_seed(0)
    metrics = train_and_score(TinyAttentionLM(task.vocab_size, task.seq_len), task, 10, seed=3, lr=1e-3)
    assert (scored.loss, scored.accuracy, trained.train_loss) == (
        metrics["loss"],
        metrics["accuracy"],
        metrics["train_loss"],
    )
    assert trained.steps == metrics["steps"] == 10
    assert trained.tokens == 10 * DEFAULT_BATCH_SIZE * task.seq_len and trained.tokens_per_s > 0
    assert scored.batches == 8 and scored.infer_latency_ms > 0


def test_one_deadline_spans_training_and_scoring():
    task = get_task("mqar")
    model = TinyAttentionLM(task.vocab_size, task.seq_len)
    with pytest.raises(EvaluationTimeout, match="after 1/5 steps"):
        train(model, task, 5, seed=0, deadline=Deadline(0.0))
    with pytest.raises(EvaluationTimeout, match="while scoring"):
        score(model, task, deadline=Deadline(0.0))
    Deadline(None).check("never")  # no limit: never raises


class _Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.A_log = nn.Parameter(torch.zeros(4, 4))
        self.A_log._no_weight_decay = True


def test_weight_decay_only_on_untagged_matrices():
    model = _Tagged()
    decay, no_decay = parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert [id(p) for p in decay["params"]] == [id(model.proj.weight)]
    exempt = {id(model.proj.bias), id(model.norm.weight), id(model.norm.bias), id(model.A_log)}
    assert {id(p) for p in no_decay["params"]} == exempt


def test_schedule_warms_up_then_decays_to_a_tenth():
    multiplier = warmup_cosine(steps=100, warmup_steps=10)
    values = [multiplier(i) for i in range(100)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(values[9:], values[10:], strict=False))
    assert values[-1] == pytest.approx(0.1, abs=0.01)


class _WithAuxLoss(nn.Module):
    """Logits from an embedding; the auxiliary loss pushes a separate parameter to 0."""

    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, vocab)
        self.balance = nn.Parameter(torch.full((8,), 3.0))
        self.aux_calls = 0

    def forward(self, ids):
        return self.embed(ids)

    def aux_loss(self):
        self.aux_calls += 1
        return self.balance.pow(2).sum()


def test_aux_loss_is_added_to_the_training_loss():
    task = get_task("mqar")
    model = _WithAuxLoss(task.vocab_size)
    metrics = train_and_score(model, task, steps=20, seed=0, lr=0.1)
    assert model.aux_calls == 20
    # Only the auxiliary loss reaches `balance`; it moved towards zero.
    assert float(model.balance.detach().abs().max()) < 3.0
    # The reported held-out loss is the task loss alone.
    assert metrics["loss"] < metrics["train_loss"]


def test_the_cpu_update_is_multi_tensor_and_bit_identical_to_the_per_tensor_loop(monkeypatch):
    """On a CPU the trainer asks for AdamW's foreach update (PyTorch picks the per-tensor loop
    there by itself) and clips with foreach norms: faster, and the same weights bit for bit,
    so results stored before the change still replay."""
    task = get_task("mqar")
    real = torch.optim.AdamW
    asked: list[object] = []

    def trained(force_loop: bool) -> dict[str, torch.Tensor]:
        def adamw(*args, **kwargs):
            asked.append(kwargs.get("foreach"))
            if force_loop:
                kwargs["foreach"] = False
            return real(*args, **kwargs)

        monkeypatch.setattr(torch.optim, "AdamW", adamw)
        torch.manual_seed(0)
        model = TinyAttentionLM(task.vocab_size, task.seq_len)
        train(model, task, 12, seed=0)
        return {k: v.clone() for k, v in model.state_dict().items()}

    fast, loop = trained(False), trained(True)
    assert asked == [True, True]
    assert fast.keys() == loop.keys()
    for name in fast:
        assert torch.equal(fast[name], loop[name]), name
