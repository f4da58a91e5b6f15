"""Several candidates per GPU: share sizing, admission, the memory estimate on meta, the
memory given back after an out-of-memory failure, and fractional GPUs on Ray (a GPU Ray is
told about on CPU machines; a real one under the `gpu` marker)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from dogma_evolve.evaluation import EvalRequest, EvaluationPool, evaluate, get_task
from dogma_evolve.evaluation.dispatch import Dispatch
from dogma_evolve.evaluation.evaluate import estimate_training_bytes
from dogma_evolve.evaluation.gpu import (
    PACKING_GRID,
    PROCESS_BYTES,
    GpuShares,
    estimate_request_bytes,
    gpu_share,
)
from dogma_evolve.evaluation.reference_models import TinyAttentionLM
from tests.evaluation import gpu_test_models

GIB = 1 << 30


def test_a_small_candidate_takes_one_grid_step():
    assert gpu_share(10 << 20, 141 * GIB) == 1 / PACKING_GRID


def test_shares_round_up_to_the_grid_with_the_safety_factor():
    gpu = 160 * GIB  # one grid step = 10 GiB
    # 2 x 4.5 GiB + 1 GiB = 10 GiB: exactly one step; a byte more: two
    assert gpu_share(int(4.5 * GIB), gpu) == 1 / 16
    assert gpu_share(int(4.5 * GIB) + 1, gpu) == 2 / 16
    assert gpu_share(35 * GIB, gpu) == 8 / 16  # 71 GiB -> 8 steps (80 GiB)
    assert gpu_share(30 * GIB, gpu, safety=1.0, process_bytes=0) == 3 / 16
    assert gpu_share(100 * GIB, gpu) == 1.0  # more than a GPU: a whole one, capped
    assert gpu_share(0, gpu) == 1 / 16  # the process alone
    with pytest.raises(ValueError):
        gpu_share(1, 0)


def test_shares_grow_with_the_estimate():
    shares = [gpu_share(n * GIB, 80 * GIB) for n in range(0, 60, 3)]
    assert shares == sorted(shares) and shares[0] == 1 / 16 and shares[-1] == 1.0
    assert PROCESS_BYTES == GIB


def test_the_meta_estimate_equals_the_estimate_of_the_built_model():
    """Building on `meta` allocates nothing yet measures the same leaf outputs."""
    task = get_task("mqar")
    genome = "tiny"

    def build(_text):
        return TinyAttentionLM(task.vocab_size, task.seq_len), task.vocab_size, task.seq_len

    request = EvalRequest(genome, "g", "mqar", 1, batch_size=8)
    torch.manual_seed(0)
    real = estimate_training_bytes(build(genome)[0], task, 8)
    assert estimate_request_bytes(request, build) == real > 0


def test_a_candidate_the_estimate_cannot_build_gets_the_fallback_share():
    calls = []

    def estimate(request, _builder):
        calls.append(request.genome_id)
        if request.genome_id == "bad":
            raise RuntimeError("no meta kernel")
        return 30 * GIB

    shares = GpuShares(160 * GIB, fallback=0.25, estimate=estimate)
    good = EvalRequest("x", "good", "mqar", 1)
    assert shares(good) == shares(good) == 7 / 16  # 61 GiB -> 7 steps; estimated once
    assert shares(EvalRequest("x", "bad", "mqar", 1)) == 0.25
    assert calls == ["good", "bad"]


class _PackedPool:
    """What Dispatch reads of a pool (`evaluation.dispatch.Launcher`), with fixed shares and no Ray."""

    def __init__(self, shares: dict[str, float], gpus: float, slots: int) -> None:
        self.shares, self.gpus, self.slots = shares, gpus, slots
        self.board = None
        self.on_lease = None
        self.timeout_s, self.timeout_grace_s = 60.0, 1.0
        self.launched: list[str] = []

    def gpu_share(self, request: EvalRequest) -> float:
        return self.shares[request.genome_id]

    def launch(
        self, request: EvalRequest, token: str, attempt: int, avoid: frozenset[str] = frozenset()
    ) -> str:
        self.launched.append(request.genome_id)
        return token


def test_admission_packs_first_fit_within_the_gpus():
    shares = {"a": 0.5, "big": 0.75, "b": 0.25, "c": 0.25, "d": 0.0625}
    pool = _PackedPool(shares, gpus=1.0, slots=8)
    dispatch = Dispatch(pool, [EvalRequest("x", g, "mqar", 1) for g in shares])  # type: ignore[arg-type]
    dispatch.admit()
    # "big" does not fit beside "a"; the smaller ones behind it fill the GPU
    assert pool.launched == ["a", "b", "c"]
    assert sum(f.gpu for f in dispatch.flights.values()) == 1.0
    # when "a" ends, "big" still waits for room (0.5 free), and "d" goes
    del dispatch.flights[next(r for r, f in dispatch.flights.items() if f.request.genome_id == "a")]
    dispatch.admit()
    assert pool.launched[-1] == "d" and "big" not in pool.launched
    dispatch.flights.clear()
    dispatch.admit()  # alone, even a share that fills the GPU goes
    assert pool.launched[-1] == "big"


def test_admission_respects_slots_and_lets_a_lone_candidate_run():
    pool = _PackedPool({"a": 1.0, "b": 1.0, "c": 0.0625}, gpus=1.0, slots=1)
    dispatch = Dispatch(pool, [EvalRequest("x", g, "mqar", 1) for g in "abc"])  # type: ignore[arg-type]
    dispatch.admit()
    assert pool.launched == ["a"]  # one slot
    cpu = _PackedPool({"a": 0.0, "b": 0.0}, gpus=0.0, slots=2)
    Dispatch(cpu, [EvalRequest("x", g, "mqar", 1) for g in "ab"]).admit()  # type: ignore[arg-type]
    assert cpu.launched == ["a", "b"]  # no GPUs: in order, by slots alone


class _OOMModel(TinyAttentionLM):
    def forward(self, ids):
        super().forward(ids)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_an_out_of_memory_candidate_is_freed_before_the_cache_is_emptied(monkeypatch):
    """The worker gives the GPU memory back after an OOM: the failed model (and the frames
    of the failed step) are gone when the CUDA cache is emptied, not merely unreferenced
    later, so the freed blocks can actually be returned."""
    task = get_task("mqar")
    models: list[weakref.ref[nn.Module]] = []
    alive_at_empty: list[bool] = []

    def build(_text):
        model = _OOMModel(task.vocab_size, task.seq_len)
        models.append(weakref.ref(model))
        return model, task.vocab_size, task.seq_len

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: alive_at_empty.append(models[-1]() is not None))
    result = evaluate(EvalRequest("oom", "g", "mqar", 2, batch_size=4, device="cpu"), build)
    assert result.status == "oom" and "CUDA out of memory" in result.reason
    assert alive_at_empty == [False]


def _rendezvous(folder, name: str, peers: int) -> EvalRequest:
    text = f"rendezvous:{folder}:{name}:{peers}"
    genome_id = hashlib.sha256(text.encode()).hexdigest()
    return EvalRequest(genome_yaml=text, genome_id=genome_id, task="mqar", fidelity=2, batch_size=4)


def _one_step_bytes() -> int:
    probe = EvalRequest("rendezvous:x:y:1", "p", "mqar", 2, batch_size=4)
    return estimate_request_bytes(probe, gpu_test_models.build)


@pytest.mark.slow
def test_fractional_shares_reach_ray_and_two_candidates_share_a_gpu(tmp_path):
    """On a Ray node told it has one GPU (none exists: the candidates train on CPU), two
    candidates each sized at half a GPU run at the same time (each waits for the other) and
    Ray gives each the share the driver sized."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("needs to start its own Ray node with a GPU resource")
    # a GPU on which one candidate needs exactly half: 2 x estimate + process = gpu / 2
    gpu_bytes = 2 * (2 * _one_step_bytes() + PROCESS_BYTES)
    ray.cloudpickle.register_pickle_by_value(gpu_test_models)
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with EvaluationPool(workers=2, build_model=gpu_test_models.build, gpu_bytes=gpu_bytes) as pool:
            assert pool.device_type == "cuda" and pool.gpus == 1.0
            requests = [_rendezvous(tmp_path, name, 2) for name in ("first", "second")]
            assert [pool.gpu_share(r) for r in requests] == [0.5, 0.5]
            results = pool.evaluate(requests)
        assert [r.status for r in results] == ["ok", "ok"], [r.reason for r in results]
        assert [r.metrics["gpu_share"] for r in results] == [0.5, 0.5]
        # no gpu_bytes: the probe finds neither nvidia-smi nor CUDA, and every candidate
        # asks for gpu_fraction
        with EvaluationPool(workers=2, build_model=gpu_test_models.build, gpu_fraction=0.5) as pool:
            assert pool._shares is None and pool.slots == 2
            assert pool.gpu_share(requests[0]) == 0.5
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(gpu_test_models)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: two candidates on one real GPU")
def test_two_small_candidates_train_at_once_on_one_gpu(tmp_path):
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(gpu_test_models)
    try:
        with EvaluationPool(workers=2, build_model=gpu_test_models.build) as pool:
            requests = [_rendezvous(tmp_path, name, 2) for name in ("first", "second")]
            assert all(0 < pool.gpu_share(r) <= 0.5 for r in requests)
            results = pool.evaluate(requests)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(gpu_test_models)
    assert [r.status for r in results] == ["ok", "ok"], [r.reason for r in results]
    assert all(r.metrics["device"] == "cuda" and r.metrics["precision"] == "bf16" for r in results)
    assert sum(r.metrics["gpu_share"] for r in results) <= 1.0


CHECK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the script does without CUDA")
def test_gpu_check_without_cuda_says_so_in_one_line_and_passes():
    done = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 and "needs CUDA" in done.stdout


@pytest.mark.slow
def test_gpu_check_dry_run_prints_the_whole_table_on_cpu():
    """Every row at tiny shapes on CPU (Triton interpreted, a two-candidate evolve run):
    the script works end to end and finds no mismatch."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(CHECK), "--dry-run"], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout
    for row in ("selective_scan", "gated_linear_recurrence", "wkv", "evolve run", "100M candidate MFU"):
        assert row in table
    assert "triton" in table and "FAIL" not in table and table.rstrip().endswith("no mismatch")


def test_a_candidate_is_capped_at_its_share_of_the_gpu():
    pool = EvaluationPool()  # not started: the GPU numbers set by hand
    request = EvalRequest("x", "g", "mqar", 1)
    assert pool.within_share(request) is request  # no GPUs: unchanged
    pool.gpus = 1.0
    pool._shares = GpuShares(160 * GIB, fallback=0.25, estimate=lambda _r, _b: 30 * GIB)
    cap = 7 * 10 * GIB - PROCESS_BYTES  # share 7/16 of 160 GiB, less the process's own
    assert pool.within_share(request).max_memory_bytes == cap
    loose = EvalRequest("x", "g", "mqar", 1, max_memory_bytes=100 * GIB)
    assert pool.within_share(loose).max_memory_bytes == cap
    tight = EvalRequest("x", "g", "mqar", 1, max_memory_bytes=GIB)
    assert pool.within_share(tight) is tight


def test_gpu_check_fails_a_kernel_that_is_off_and_passes_one_that_is_not(monkeypatch):
    """The check's verdict on one kernel row: the reference itself passes, a result 1 % off
    (within bf16's tolerance, far outside fp32's) fails, and so does a backend that raises."""
    monkeypatch.syspath_prepend(str(CHECK.parent))
    monkeypatch.syspath_prepend(str(CHECK.parents[1]))  # the kernels package before benchmarks/kernels.py
    import gpu_check
    from gpu_check_kernels import OPS, TINY, TOLERANCES, on, reference

    op = OPS[0]
    cpu = torch.device("cpu")
    base = op.make(TINY, torch.Generator().manual_seed(0))
    inputs = {dtype: on(base, cpu, dtype) for dtype in TOLERANCES}
    refs = {dtype: reference(op, inputs[dtype], 1) for dtype in TOLERANCES}
    settings = gpu_check.Settings(cpu, True, 0.0, None, warmup=0, repeats=1)

    def row(run):
        return gpu_check._kernel_row(op, "x", run, inputs, refs, (1.0, 1.0), TINY, settings)

    def off(x, _backend):
        return op.run(x, "torch") * 1.01

    def broken(_x, _backend):
        raise RuntimeError("kernel launch failed")

    def exact(x, _backend):
        return op.run(x, "torch")

    assert row(exact)[-1] == "ok"
    assert row(off)[-1] == "FAIL"
    assert row(broken)[-1] == "FAIL" and "kernel launch failed" in row(broken)[-2]
