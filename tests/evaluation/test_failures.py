"""evaluate(): every outcome is a typed result, never an exception."""

import json
from typing import get_args

import pytest

from dogma_evolve.evaluation import STATUSES, EvalRequest, EvalResult, evaluate, get_task
from dogma_evolve.evaluation.result import Status
from dogma_evolve.store import EVALUATION_STATUSES
from tests.evaluation.eval_test_models import build


def request(genome, fidelity=3, **fields):
    return EvalRequest(
        genome_yaml=genome, genome_id=f"id-{genome}", task="mqar", fidelity=fidelity, seed=0, **fields
    )


def test_ok_result_carries_metrics_key_fields_and_round_trips():
    result = evaluate(request("tiny", fidelity=5, task_overrides={"num_pairs": 3}), build)
    assert result.status == "ok" and result.reason == "" and result.ok
    key = (result.genome_id, result.task, result.fidelity, result.seed)
    assert key == ("id-tiny", "mqar", 5, 0)
    assert result.task_overrides == {"num_pairs": 3}
    for name in ("loss", "accuracy", "train_tokens_per_s", "infer_latency_ms", "steps", "params"):
        assert name in result.metrics
    assert result.metrics["params"] > 10_000 and result.wall_seconds > 0
    data = json.loads(json.dumps(result.to_dict()))
    assert EvalResult.from_dict(data) == result
    assert EvalResult.from_dict({**data, "added_later": 1}) == result


def test_request_round_trips():
    original = request("tiny", timeout_s=5.0, max_memory_bytes=10, task_overrides={"seq_len": 40})
    assert EvalRequest.from_dict(json.loads(json.dumps(original.to_dict()))) == original


@pytest.mark.parametrize(
    ("genome", "fields", "status", "reason"),
    [
        ("invalid", {}, "invalid", "region 'r9' has no bases"),
        ("small-vocab", {}, "invalid", "vocabulary"),
        ("short-context", {}, "invalid", "max_len"),
        ("tiny", {"task_overrides": {"num_pairs": 0}}, "invalid", "num_pairs"),
        ("nan", {}, "nan", "loss is nan"),
        ("tiny", {"max_memory_bytes": 1024}, "oom", "exceeds the limit 1.0 KiB"),
        ("cuda-oom", {}, "oom", "out of memory"),
        ("sleep:0.3", {"timeout_s": 0.5, "fidelity": 50}, "timeout", "time limit 0.5s"),
        ("crash", {}, "crash", "RuntimeError: boom in forward"),
    ],
)
def test_failures_are_typed_results(genome, fields, status, reason):
    fields.setdefault("fidelity", 3)
    result = evaluate(request(genome, **fields), build)
    assert result.status == status, result
    assert reason in result.reason
    assert "\n" not in result.reason
    assert result.genome_id == f"id-{genome}"


def test_a_generous_memory_budget_passes_and_reports_the_estimate():
    result = evaluate(request("tiny", max_memory_bytes=2**30), build)
    assert result.status == "ok"
    # Weights, grads and AdamW moments alone take 16 bytes per float32 parameter.
    assert result.metrics["estimated_memory_bytes"] > 16 * result.metrics["params"]


def test_the_timeout_stops_training_early():
    result = evaluate(request("sleep:0.2", fidelity=1000, timeout_s=0.5), build)
    assert result.status == "timeout"
    assert result.wall_seconds < 5  # not 1000 steps of 0.2 s


def test_a_custom_accountant_adds_its_figures():
    accounts = lambda yaml_text, seq_len: {"flops_per_token": 7 * seq_len, "params": 123}
    result = evaluate(request("tiny"), build, account_model=accounts)
    assert result.metrics["params"] == 123
    assert result.metrics["flops_per_token"] == 7 * 15


def test_a_failing_accountant_does_not_fail_the_candidate():
    def broken(yaml_text, seq_len):
        raise KeyError("flops")

    result = evaluate(request("tiny"), build, account_model=broken)
    assert result.status == "ok"
    assert "KeyError" in result.metrics["accounting_error"]


def test_statuses_are_validated():
    # "filtered": set by the engine's pre-filter (evolution.evaluating), never by a pool
    assert STATUSES == ("ok", "invalid", "nan", "oom", "timeout", "crash", "filtered")
    assert STATUSES is EVALUATION_STATUSES  # one definition: the store's
    assert get_args(Status) == STATUSES  # the type checkers' copy agrees
    with pytest.raises(ValueError):
        EvalResult(genome_id="g", task="mqar", fidelity=1, seed=0, status="exploded")


def test_default_builder_marks_a_bad_genome_invalid():
    pytest.importorskip("dogma_evolve.genome")
    result = evaluate(request("this: [is not, a genome"))
    assert result.status == "invalid", result
    assert result.reason


def _tiny_genome_yaml(vocab):
    import yaml

    return yaml.safe_dump(
        {
            "regions": [
                {
                    "id": "s0",
                    "type": "structural",
                    "settings": {"d_model": 32, "vocab": vocab, "max_len": 32, "positions": "learned"},
                },
                {"id": "p1", "type": "promoter", "settings": {"copies": 1}},
                {
                    "id": "c1",
                    "type": "coding",
                    "bases": [
                        {"base": "T", "kind": "attention", "params": {"heads": 2}},
                        {"base": "A", "kind": "mlp", "params": {"hidden": 64}},
                    ],
                },
            ]
        }
    )


def test_default_builder_decodes_and_accounts_a_dogma_genome():
    pytest.importorskip("dogma_evolve.phenotype")
    vocab = get_task("mqar").vocab_size
    result = evaluate(request(_tiny_genome_yaml(vocab), fidelity=5))
    assert result.status == "ok", result
    for name in ("params", "active_params", "flops_per_token", "state_bytes_per_token"):
        assert result.metrics[name] > 0, name
    assert "accounting_error" not in result.metrics

    too_small = evaluate(request(_tiny_genome_yaml(vocab - 1), fidelity=5))
    assert too_small.status == "invalid" and "vocabulary" in too_small.reason
