"""Every evaluation records the FLOP/s its training achieved and the peak memory it reached,
with what that peak counts (``peak_memory_kind``) and since when (``peak_memory_scope``)."""

from __future__ import annotations

import sys

import pytest
import torch

from dogma_evolve.evaluation import EvalRequest, evaluate
from dogma_evolve.evaluation import memory as peak_memory
from dogma_evolve.evaluation.memory import (
    PeakMemory,
    lifetime_peak_bytes,
    reset_process_peak,
    resident_high_water_bytes,
)
from dogma_evolve.genome import Genome
from tests.evaluation.eval_test_models import build

# an attention layer and a SwiGLU: accounted, so its evaluation records train_flops
GENOME = """
regions:
- {id: s0, type: structural, settings: {d_model: 32, vocab: 29, max_len: 15, positions: rope}}
- id: c1
  type: coding
  bases:
  - {base: T, kind: attention, params: {heads: 2}}
  - {base: A, kind: swiglu}
"""
MIB = 2**20
RESETTABLE = sys.platform.startswith("linux") and reset_process_peak()


def test_a_real_evaluation_records_its_flop_rate_and_peak_memory():
    genome = Genome.from_yaml(GENOME)
    result = evaluate(EvalRequest(genome.to_yaml(), genome.id, "mqar", 3, seed=1, device="cpu"))
    assert result.status == "ok", result.reason
    m = result.metrics
    # FLOP/s over the trainer's forward, backward and update time, the time tokens/s uses
    assert m["train_compute_seconds"] > 0
    assert m["train_flops_per_s"] == pytest.approx(m["train_flops"] / m["train_compute_seconds"])
    assert m["train_flops_per_s"] > 0
    assert m["train_tokens_per_s"] == pytest.approx(m["train_tokens"] / m["train_compute_seconds"])
    # the process's resident peak: at least the weights, and this process holds torch
    assert m["peak_memory_kind"] == "rss" and isinstance(m["peak_memory_bytes"], int)
    assert m["peak_memory_bytes"] > 16 * m["params"]
    assert m["peak_memory_scope"] == ("evaluation" if RESETTABLE else "process")


def test_without_flops_there_is_no_flop_rate_but_a_peak():
    result = evaluate(EvalRequest("tiny", "id-tiny", "mqar", 2, seed=0, device="cpu"), build)
    assert result.status == "ok", result.reason
    assert "train_flops" not in result.metrics and "train_flops_per_s" not in result.metrics
    assert result.metrics["train_compute_seconds"] > 0 and result.metrics["peak_memory_bytes"] > 0


def test_a_failed_evaluation_records_its_peak_but_no_compute():
    result = evaluate(EvalRequest("nan", "id-nan", "mqar", 3, seed=0, device="cpu"), build)
    assert result.status == "nan"
    assert "train_flops_per_s" not in result.metrics and "train_tokens" not in result.metrics
    assert result.metrics["peak_memory_bytes"] > 0 and result.metrics["peak_memory_kind"] == "rss"


@pytest.mark.skipif(not RESETTABLE, reason="the resident peak cannot be reset here")
def test_the_evaluation_peak_leaves_out_what_the_process_held_before():
    big = torch.ones(64 * MIB // 4)  # 64 MiB, touched, then given back (mmap'd: to the kernel)
    del big
    before = resident_high_water_bytes()
    probe = PeakMemory.start("cpu")
    evaluation_peak = probe.metrics()
    assert evaluation_peak["peak_memory_scope"] == "evaluation"
    assert before is not None and evaluation_peak["peak_memory_bytes"] < before - 32 * MIB


def test_without_a_reset_the_peak_is_the_process_lifetime_one(monkeypatch, tmp_path):
    monkeypatch.setattr(peak_memory, "_CLEAR_REFS", str(tmp_path / "absent" / "clear_refs"))
    assert reset_process_peak() is False
    probe = PeakMemory.start("cpu")
    assert probe.scope == "process"
    metrics = probe.metrics()
    assert metrics["peak_memory_scope"] == "process" and metrics["peak_memory_kind"] == "rss"
    assert metrics["peak_memory_bytes"] == lifetime_peak_bytes()
    # and an evaluation under it says so
    result = evaluate(EvalRequest("tiny", "id-tiny", "mqar", 2, seed=0, device="cpu"), build)
    assert result.metrics["peak_memory_scope"] == "process"


def test_an_unreadable_status_falls_back_to_the_lifetime_peak(monkeypatch, tmp_path):
    probe = PeakMemory("rss", "evaluation", torch.device("cpu"))
    monkeypatch.setattr(peak_memory, "_STATUS", str(tmp_path / "no-status"))
    assert probe.metrics()["peak_memory_scope"] == "process"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_evaluation_records_the_allocator_peak():
    genome = Genome.from_yaml(GENOME)
    result = evaluate(EvalRequest(genome.to_yaml(), genome.id, "mqar", 3, seed=1, device="cuda"))
    assert result.status == "ok", result.reason
    m = result.metrics
    assert m["peak_memory_kind"] == "cuda_allocated" and m["peak_memory_scope"] == "evaluation"
    assert m["peak_memory_bytes"] >= 16 * m["params"]  # weights, gradients, AdamW's two moments
    assert m["train_flops_per_s"] > 0
