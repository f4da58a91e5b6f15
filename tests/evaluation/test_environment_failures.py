"""Environment failures told apart from a genome's own (`evaluation.environment`).

Real faults, in this process: a stale module shadowing a dependency the forward pass imports
(a local ``sympy.py`` first on the path), a full and a read-only scratch file system (real
tmpfs mounts: ENOSPC, EROFS), a missing compiler; then the genome's own failures, which must
stay the genome's: a shape mismatch, a block's ``AttributeError``, a non-finite loss, its own out-of-memory.
The driver's side (`evaluation.dispatch.fetch_result`, `Dispatch.retry_or_fail`): a Ray
error whose cause is an import error and a worker lost on every attempt.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dogma_evolve.evaluation import EvalRequest, evaluate, get_task
from dogma_evolve.evaluation.environment import (
    ENVIRONMENT_MARK,
    EnvironmentFailure,
    classify_environment,
    environment_cause,
    foreign_module,
    is_environment,
)
from dogma_evolve.evaluation.errors import NonFiniteLoss
from dogma_evolve.evaluation.reference_models import TinyAttentionLM
from dogma_evolve.evaluation.result import EvalResult
from tests.mounts import tmpfs

TASK = get_task("mqar")


def _request(text: str = "tiny") -> EvalRequest:
    return EvalRequest(genome_yaml=text, genome_id="ab" * 32, task="mqar", fidelity=2, seed=0)


def _tiny() -> tuple[nn.Module, int, int]:
    return TinyAttentionLM(TASK.vocab_size, TASK.seq_len), TASK.vocab_size, TASK.seq_len


class _Broken(nn.Module):
    """A model whose forward raises what ``make`` returns (built lazily, in the forward)."""

    def __init__(self, make) -> None:
        super().__init__()
        self.inner = TinyAttentionLM(TASK.vocab_size, TASK.seq_len)
        self.make = make

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.make()
        return self.inner(ids)


def _builder(make):
    return lambda _text: (_Broken(make), TASK.vocab_size, TASK.seq_len)


# -- the genome's own failures stay the genome's ---------------------------------------


def test_a_shape_mismatch_is_the_genomes_crash():
    def mismatch() -> None:
        torch.zeros(2, 3) @ torch.zeros(4, 5)

    result = evaluate(_request(), _builder(mismatch))
    assert result.status == "crash" and not is_environment(result)
    assert "RuntimeError" in result.reason


def test_a_blocks_attribute_and_type_errors_are_the_genomes():
    for error in (AttributeError("'Mixer' object has no attribute 'gate'"), TypeError("bad operand")):

        def raise_it(error: Exception = error) -> None:
            raise error

        result = evaluate(_request(), _builder(raise_it))
        assert result.status == "crash" and not is_environment(result), result.reason


def test_nan_and_its_own_oom_stay_typed_genome_failures():
    def nan() -> None:
        raise NonFiniteLoss("loss is nan at step 1")

    def oom() -> None:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4 PiB")

    assert evaluate(_request(), _builder(nan)).status == "nan"
    result = evaluate(_request(), _builder(oom))
    assert result.status == "oom" and not is_environment(result)
    budget = evaluate(EvalRequest(**{**_request().__dict__, "max_memory_bytes": 1}), lambda _t: _tiny())
    assert budget.status == "oom" and not is_environment(budget)


def test_an_os_error_a_genome_could_name_is_not_environmental():
    assert environment_cause(FileNotFoundError(errno.ENOENT, "No such file", "weights.bin")) is None
    assert environment_cause(RuntimeError("Expected all tensors to be on the same device")) is None


# -- real environmental faults ----------------------------------------------------------


def test_a_module_shadowing_a_dependency_is_an_environment_failure(tmp_path):
    """A stale ``sympy.py`` first on the path: the forward pass imports torch's symbolic
    shapes, which import SymPy, on the first candidate of a fresh process (a worker)."""
    (tmp_path / "sympy.py").write_text('"""Not SymPy: a stale local module of the same name."""\n')
    script = textwrap.dedent(
        """
        from dogma_evolve.evaluation import EvalRequest, evaluate
        from dogma_evolve.genome import Genome
        from dogma_evolve.genome.presets import dogma
        g = Genome.from_dict(dogma())
        r = evaluate(EvalRequest(genome_yaml=g.to_yaml(), genome_id=g.id, task="mqar", fidelity=2, seed=0))
        print(r.status)
        print(r.reason)
        """
    )
    env = {"PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    status, reason = proc.stdout.strip().splitlines()[-2:]
    assert status == "crash", proc.stdout
    assert reason.startswith(ENVIRONMENT_MARK) and "ImportError" in reason and "sympy" in reason, reason


def _write_into(folder: Path, size: int) -> Callable[[], None]:
    def write_scratch() -> None:
        with open(folder / "scratch.bin", "wb") as scratch:  # noqa: PTH123 - the real write
            scratch.write(b"x" * size)
            scratch.flush()

    return write_scratch


def test_a_full_disk_is_an_environment_failure(tmp_path):
    """A scratch file system of 64 KiB (a real tmpfs mount) given a 1 MiB write: ENOSPC."""
    with tmpfs(tmp_path / "scratch", "size=64k") as scratch:
        result = evaluate(_request(), _builder(_write_into(scratch, 1 << 20)))
    assert is_environment(result), result.reason
    assert "ENOSPC" in result.reason


def test_a_read_only_scratch_mount_is_an_environment_failure(tmp_path):
    """A real read-only mount refuses the write with EROFS."""
    with tmpfs(tmp_path / "scratch", "ro,size=64k") as scratch:
        result = evaluate(_request(), _builder(_write_into(scratch, 16)))
    assert is_environment(result), result.reason
    assert "EROFS" in result.reason


def test_permission_and_quota_errors_are_environment_failures():
    """EACCES and EDQUOT as the kernel words them (as root a chmod refuses nothing, and no
    quota is set up here), raised from the forward pass."""
    for code in (errno.EACCES, errno.EDQUOT):
        error = OSError(code, "refused", "/tmp/scratch/x")

        def fail(error: OSError = error) -> None:
            raise error

        assert is_environment(evaluate(_request(), _builder(fail)))


def test_a_missing_compiler_is_an_environment_failure(monkeypatch, tmp_path):
    """No compiler on the worker's PATH: what building a C++ extension runs is not there."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no cc, no c++, no ninja

    def compile_extension() -> None:
        subprocess.run(["c++", "--version"], check=True, capture_output=True)

    result = evaluate(_request(), _builder(compile_extension))
    assert is_environment(result) and "missing build tool c++" in result.reason, result.reason


def test_an_import_error_deep_in_a_chain_is_found():
    try:
        try:
            import dogma_evolve_not_installed  # noqa: F401
        except ImportError as inner:
            raise RuntimeError("building the block failed") from inner
    except RuntimeError as outer:
        assert "ModuleNotFoundError" in (environment_cause(outer) or "")


def test_a_module_of_ours_from_another_copy_is_found(tmp_path, monkeypatch):
    assert foreign_module() is None
    stale = types.ModuleType("dogma_evolve.kernels.stale")
    stale.__file__ = str(tmp_path / "dogma_evolve" / "kernels" / "stale.py")
    monkeypatch.setitem(sys.modules, "dogma_evolve.kernels.stale", stale)
    assert "dogma_evolve.kernels.stale" in (foreign_module() or "")
    reason = classify_environment(AttributeError("module has no attribute 'selective_scan'"))
    assert reason is not None and reason.startswith(ENVIRONMENT_MARK) and "AttributeError" in reason
    result = evaluate(_request(), _builder(lambda: torch.zeros(2, 3) @ torch.zeros(4, 5)))
    assert is_environment(result)  # with a foreign module loaded, no failure is the genome's


def test_environment_failure_names_the_cause_and_the_genome():
    result = EvalResult.for_request(_request(), "crash", f"{ENVIRONMENT_MARK} ImportError: x on host")
    message = str(EnvironmentFailure(result))
    assert message.startswith(ENVIRONMENT_MARK) and "nothing was recorded against genome abab" in message
    assert "\n" not in message


# -- the driver's side -------------------------------------------------------------------


def test_ray_errors_wrapping_an_import_error_and_lost_workers_are_environmental(monkeypatch):
    ray = pytest.importorskip("ray")
    from ray import exceptions

    from dogma_evolve.evaluation.dispatch import RAY_GAVE_UP, fetch_result

    def get(error: Exception) -> None:  # the "ref" is the error its task ended with
        raise error

    monkeypatch.setattr(ray, "get", get)
    request = _request()
    unpickled = exceptions.RaySystemError(ModuleNotFoundError("No module named 'dogma_evolve.evaluation'"))
    first = fetch_result(unpickled, request, 2)
    second = fetch_result(exceptions.WorkerCrashedError(), request, 2)
    third = fetch_result(ValueError("a builder that does not pickle"), request, 2)
    assert is_environment(first) and "ModuleNotFoundError" in first.reason
    assert is_environment(second) and second.reason.startswith(RAY_GAVE_UP)
    assert third.status == "crash" and not is_environment(third)


def test_every_attempt_lost_or_expired_is_an_environment_failure():
    """A dead node: each attempt's lease expired (or its worker was lost) until the attempts
    ran out; the final crash is the machine's, while a transient failure's stays as it was."""
    from dogma_evolve.evaluation.dispatch import Dispatch, Flight

    pool = types.SimpleNamespace(board=None, max_retries=2, on_lease=None)
    outcomes = {}
    for state, reason in (
        ("expired", "lease expired: no heartbeat for 31s (lease 30s)"),
        ("lost", "transient failure: scratch disk unavailable (transient)"),
    ):
        dispatch = Dispatch(pool, [_request()])  # type: ignore[arg-type]
        dispatch.waiting.clear()
        dispatch.attempts = [3]
        dispatch.flights = {"ref": Flight(0, _request(), 60.0, 0.0, 3, "token", 0.0)}
        dispatch.retry_or_fail("ref", state, reason)
        outcomes[state] = dispatch.results[0]
    assert is_environment(outcomes["expired"]) and "gave up after 3 attempts" in outcomes["expired"].reason
    assert outcomes["lost"].status == "crash" and not is_environment(outcomes["lost"])


@pytest.mark.slow
def test_a_worker_killed_on_every_attempt_is_an_environment_failure(tmp_path):
    """A real kill: the candidate's worker process is SIGKILLed on each of Ray's attempts (a
    node that keeps dying); when they run out the result is the machine's failure, which the
    engine stops on instead of recording it against the genome."""
    ray = pytest.importorskip("ray")
    from dogma_evolve.evaluation import EvaluationPool
    from tests.faults import fault_models

    ray.cloudpickle.register_pickle_by_value(fault_models)
    try:
        with EvaluationPool(workers=1, max_retries=1, build_model=fault_models.build, lease_s=None) as pool:
            [result] = pool.evaluate([_request(f"sigkill-always:{tmp_path}")])
    finally:
        ray.cloudpickle.unregister_pickle_by_value(fault_models)
    assert is_environment(result), result.reason
    assert "worker lost 2 times" in result.reason
    assert len((tmp_path / "sigkill-always.calls").read_text().split()) == 2  # Ray tried it twice


@pytest.mark.slow
def test_a_stale_copy_of_our_package_on_the_workers_path_is_an_environment_failure(tmp_path, monkeypatch):
    """Another ``dogma_evolve`` first on the Ray workers' ``PYTHONPATH`` (a stale copy): the
    task's own arguments cannot be unpickled there, on every attempt. The driver reads the
    cause off Ray's error and retries it, then gives up with the machine's failure."""
    pytest.importorskip("ray")
    from dogma_evolve.evaluation import EvaluationPool

    stale = tmp_path / "stale" / "dogma_evolve"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text('"""An old copy without the packages."""\n')
    monkeypatch.setenv("PYTHONPATH", str(stale.parent))  # Ray's workers start with it
    with EvaluationPool(workers=1, max_retries=2, lease_s=None) as pool:
        [result] = pool.evaluate([_request()])
    assert is_environment(result), result.reason
    assert "No module named 'dogma_evolve.evaluation'" in result.reason
    assert "gave up after 3 attempts" in result.reason
