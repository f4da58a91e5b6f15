"""Evaluate one candidate: build, account, train, score — and never raise.

Every outcome is an ``EvalResult``. A failure is data (``invalid``, ``nan``, ``oom``,
``timeout``, ``crash``) that scores as a failure; it must not stop an evolutionary run.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from dogma_evolve.phenotype.weights import weights_bytes

from .budget import learning_rate, training_flops
from .environment import classify_environment, environment_reason
from .errors import EvaluationTimeout, IncompatibleModel, MemoryBudgetExceeded, NonFiniteLoss
from .memory import PeakMemory, free_device_memory
from .precision import resolve_precision
from .result import EvalRequest, EvalResult, Status, one_line
from .tasks import Task, TaskCodeError, get_task
from .trainer import DEFAULT_LR, Deadline, train_and_score

DEFAULT_STEPS = 300  # a fidelity at which the default mqar separates mixers from none

#: ``build_model(genome_yaml) -> model | (model, vocab_size) | (model, vocab_size, max_len)``
#: (``None`` for an unknown size). Raising ``ValueError`` (``genome.GenomeError`` is one)
#: marks the genome ``invalid``, as do sizes smaller than the task needs.
ModelBuilder = Callable[[str], "nn.Module | tuple[Any, ...]"]
#: ``account_model(genome_yaml, seq_len) -> {"params": ..., "flops_per_token": ...}``.
ModelAccountant = Callable[[str, int], Mapping[str, int]]

ACCOUNT_FIELDS = (
    "params",
    "active_params",
    "state_bytes_per_token",
    "state_bytes_fixed",
    "flops_per_token",
)


def build_from_genome(genome_yaml: str) -> tuple[nn.Module, int | None, int | None]:
    """The default builder: parse the DOGMA genome and decode its phenotype.

    Returns ``(model, vocab, max_len)`` from the genome's structural region. ``genome``
    and ``phenotype`` are imported at call time, so this package loads without them.
    """
    from dogma_evolve.genome import Genome
    from dogma_evolve.phenotype import decode

    genome = Genome.from_yaml(genome_yaml)
    structural = getattr(genome, "structural", None) or {}
    return (
        decode(genome),
        _int_or_none(structural.get("vocab")),
        _int_or_none(structural.get("max_len")),
    )


def account_genome(genome_yaml: str, seq_len: int) -> dict[str, int]:
    """The default accountant: ``phenotype.account`` at the task's context length."""
    from dogma_evolve.genome import Genome
    from dogma_evolve.phenotype import account

    accounting = account(Genome.from_yaml(genome_yaml), seq_len)
    return {
        name: int(getattr(accounting, name))
        for name in ACCOUNT_FIELDS
        if getattr(accounting, name, None) is not None
    }


def evaluate(
    request: EvalRequest,
    build_model: ModelBuilder | None = None,
    *,
    account_model: ModelAccountant | None = None,
    train_options: Mapping[str, Any] | None = None,
    deadline: Deadline | None = None,
) -> EvalResult:
    """Train and score ``request``'s genome; always returns an ``EvalResult`` (see
    ``train_model``). With ``request.return_weights`` the result carries the trained
    weights as safetensors bytes."""
    model, result = train_model(
        request, build_model, account_model=account_model, train_options=train_options, deadline=deadline
    )
    if model is not None and request.return_weights:
        result = dataclasses.replace(result, weights=safetensors_bytes(model))
    return result


def safetensors_bytes(model: nn.Module) -> bytes:
    """The model's weights as a safetensors file's bytes: shared tensors stored once, the
    same bytes in every process (`phenotype.weights`, which copies each tensor to the CPU;
    the model stays where it is)."""
    return weights_bytes(model)


def train_model(
    request: EvalRequest,
    build_model: ModelBuilder | None = None,
    *,
    account_model: ModelAccountant | None = None,
    train_options: Mapping[str, Any] | None = None,
    deadline: Deadline | None = None,
) -> tuple[nn.Module | None, EvalResult]:
    """Train and score ``request``'s genome on its task: the trained model (None unless
    the status is ``ok``) and the ``EvalResult``. Never raises.

    ``build_model`` defaults to ``build_from_genome`` and then ``account_model`` to
    ``account_genome``; with a custom builder, parameters are counted with ``numel``
    unless an accountant is given. ``train_options`` go to ``train_and_score``
    (``lr``, ``weight_decay`` ...).

    Status mapping: a user task whose code this process cannot import, or whose code has
    another fingerprint than the request's (``TaskCodeError``) -> ``crash``, naming the host;
    ``ValueError`` while building (``GenomeError`` included), an unknown task or a model
    whose logits do not fit the task -> ``invalid``; a non-finite loss or gradient -> ``nan``;
    ``torch.OutOfMemoryError``, ``MemoryError``, a ``RuntimeError`` saying "out of memory"
    (or the CPU allocator's wording), or an estimated training memory over
    ``request.max_memory_bytes`` -> ``oom``; past the time limit -> ``timeout``: building and
    the first steps within ``request.timeout_s`` seconds, then at least ten times the
    candidate's projected time at the pace of its first steps (`trainer.Deadline`; the
    caller's ``deadline``, if given, is the one used, so another thread can read
    ``remaining()``); any other exception -> ``crash`` with its type and message.
    A failure that is the machine's rather than the genome's (`evaluation.environment`: an
    import error, a full or read-only file system, a missing build tool, a module of ours
    loaded from another copy, a user's task or plugin code this worker lacks) is a ``crash``
    whose reason starts with ``ENVIRONMENT_MARK``, whatever status it would have had.

    ``request.precision`` is resolved for the device (``auto``: bf16 on CUDA, the
    measured probe's choice on a CPU, `evaluation.precision.cpu_probe`) and recorded as
    ``metrics["precision"]``. From the moment the device is known
    (before the model is built) to the end, the evaluation's peak memory is measured
    (`memory.PeakMemory`) and recorded as ``peak_memory_bytes`` with ``peak_memory_kind``
    (``rss``: the process's resident set on the CPU; ``cuda_allocated``: the CUDA
    allocator's tensors) and ``peak_memory_scope`` (``evaluation``, or ``process`` where the
    peak could not be reset and is the process's lifetime peak), a failed evaluation's
    up to its failure. However it ends, the candidate's
    model, its activations and the exception that ended it are released and the CUDA
    allocator's cache emptied before this returns (``free_device_memory``), so a worker that
    ran out of GPU memory goes on to its next candidate with the memory back.
    """
    start = time.perf_counter()
    metrics: dict[str, Any] = {}
    model: nn.Module | None = None
    built: object = None
    candidate: object = None
    trained: nn.Module | None = None
    peak: PeakMemory | None = None

    def finish(
        status: Status, reason: str = "", error: BaseException | None = None
    ) -> tuple[nn.Module | None, EvalResult]:
        if status != "ok":  # the machine's fault rather than the genome's? (evaluation.environment)
            environment = classify_environment(error)
            if environment is not None:
                status, reason = "crash", environment
        if peak is not None:  # up to the end, or to the failure
            metrics.update(peak.metrics())
        return trained, EvalResult.for_request(
            request, status, reason, metrics, wall_seconds=time.perf_counter() - start
        )

    try:
        try:
            if request.plugins:
                from dogma_evolve.phenotype.plugins import import_pinned, used_by

                import_pinned(tuple(request.plugins))
                used = used_by(request.plugins, request.genome_yaml)
                if used:  # the code its result depends on: reused only under the same
                    metrics["plugins"] = used
        except ValueError as error:  # this worker lacks the plugin's code, or has another version
            return finish("crash", environment_reason(f"plugin code on {socket.gethostname()}: {error}"))
        try:
            task = get_task(request.task, **request.task_overrides)
        except TaskCodeError as error:  # this worker lacks the user's code, or has another version
            return finish("crash", environment_reason(f"task code on {socket.gethostname()}: {error}"))
        except ValueError as error:
            return finish("invalid", f"task: {error}", error)
        device = torch.device(request.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        try:
            precision = resolve_precision(request.precision, device.type)
        except ValueError as error:
            return finish("invalid", str(error))
        metrics["precision"] = precision
        batch_size = request.batch_size or task.train_batch_size
        torch.manual_seed(request.seed)  # initial weights follow the seed
        peak = PeakMemory.start(device)  # this evaluation's peak from here (evaluation.memory)

        if build_model is None:
            build_model = build_from_genome
            account_model = account_model or account_genome
        try:
            built = build_model(request.genome_yaml)
        except ValueError as error:
            return finish("invalid", _describe(error), error)
        candidate, vocab_size, max_len = _unpack_built(built)
        if not isinstance(candidate, nn.Module):
            return finish("invalid", f"builder returned {type(candidate).__name__}, not a Module")
        model = candidate
        if vocab_size is not None and vocab_size < task.vocab_size:
            return finish(
                "invalid",
                f"genome vocabulary {vocab_size} < task {task.name} vocabulary {task.vocab_size}",
            )
        if max_len is not None and max_len < task.seq_len:
            return finish("invalid", f"genome max_len {max_len} < task {task.name} seq_len {task.seq_len}")

        metrics["params"] = sum(p.numel() for p in model.parameters())
        if account_model is not None:
            try:
                metrics.update(account_model(request.genome_yaml, task.seq_len))
            except Exception as error:  # accounting bugs must not hide a trained score
                metrics["accounting_error"] = one_line(_describe(error), 200)

        if device.type == "cuda" and request.max_memory_bytes is None:
            # a worker process trains many candidates: no cap left over from a previous one
            torch.cuda.set_per_process_memory_fraction(1.0, device)
        if request.max_memory_bytes is not None:
            estimate = estimate_training_bytes(model, task, batch_size, limit=request.max_memory_bytes)
            metrics["estimated_memory_bytes"] = estimate
            if estimate > request.max_memory_bytes:
                raise MemoryBudgetExceeded(
                    f"estimated training memory {_bytes(estimate)} exceeds the limit "
                    f"{_bytes(request.max_memory_bytes)}"
                )
            if device.type == "cuda":
                total = torch.cuda.get_device_properties(device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, request.max_memory_bytes / total), device)

        time_limit = None
        if request.timeout_s is not None:
            time_limit = request.timeout_s - (time.perf_counter() - start)
            if time_limit <= 0:
                raise EvaluationTimeout(request.timeout_s, "while building")
        model.to(device)
        options = dict(train_options or {})
        width = model_width(model)
        if "lr" not in options and width is not None:
            options["lr"] = learning_rate(width)  # the rule by width (evaluation.budget)
        scores = train_and_score(
            model,
            task,
            steps=request.fidelity,
            seed=request.seed,
            batch_size=batch_size,
            time_limit_s=time_limit,
            device=device,
            precision=precision,
            deadline=deadline,
            **options,
        )
        metrics["lr"] = options.get("lr", DEFAULT_LR)
        metrics.update(scores)
        metrics.update(compute_metrics(metrics, batch_size, task.seq_len))
        metrics["train_seconds"] = metrics.pop("wall_seconds")
        metrics["device"] = device.type
        trained = model
        return finish("ok")
    except EvaluationTimeout as error:  # report the request's limit, not what was left
        granted = (
            "" if error.limit_s <= (request.timeout_s or 0) + 1e-6 else f" (pace-scaled {error.limit_s:.4g}s)"
        )
        return finish("timeout", f"time limit {request.timeout_s:g}s{granted} reached {error.progress}")
    except Exception as error:
        return finish(*classify_failure(error), error)
    finally:
        # Every local that holds the candidate: a model that failed is freed here, before
        # the allocator's cache is emptied (``trained`` is the caller's).
        model = built = candidate = None
        free_device_memory(failed=trained is None)


def compute_metrics(metrics: Mapping[str, Any], batch_size: int, seq_len: int) -> dict[str, int | float]:
    """The training compute of a finished evaluation, from its metrics.

    ``train_tokens`` = ``steps * batch_size * seq_len`` (what the trainer trained on);
    ``train_flops`` = ``evaluation.budget.training_flops(flops_per_token, steps,
    batch_size, seq_len)``, i.e. 3 x the forward FLOPs of those tokens (≈ 6·N·D plus the
    sequence mixer's term, see ``evaluation.budget``), rounded to an integer, only where the
    accountant gave ``flops_per_token`` (a custom builder without one records tokens
    alone); ``train_flops_per_s`` = ``train_flops / train_compute_seconds``, the FLOP/s the
    training achieved over the trainer's forward, backward and update time (the time
    ``train_tokens_per_s`` divides by too: not the batches' generation, the deadline's
    checks or the scoring), where both are recorded and that time is above 0. A failed
    evaluation records none of them: what it trained before it failed is not counted.
    """
    steps = int(metrics["steps"])
    out: dict[str, int | float] = {"train_tokens": steps * batch_size * seq_len}
    flops_per_token = metrics.get("flops_per_token")
    if isinstance(flops_per_token, int) and not isinstance(flops_per_token, bool):
        flops = round(training_flops(flops_per_token, steps, batch_size, seq_len))
        out["train_flops"] = flops
        seconds = metrics.get("train_compute_seconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            out["train_flops_per_s"] = flops / seconds
    return out


# How allocators word a failed allocation in a plain RuntimeError: CUDA and others say
# "out of memory"; PyTorch's CPU allocator says "DefaultCPUAllocator: can't allocate
# memory" (Linux, errno 12) or "DefaultCPUAllocator: not enough memory" (Windows).
_OOM_MARKS = ("out of memory", "can't allocate memory", "not enough memory")


def classify_failure(error: BaseException) -> tuple[Status, str]:
    """Map an exception raised while training or scoring to ``(status, one-line reason)``."""
    if isinstance(error, NonFiniteLoss):
        return "nan", str(error)
    if isinstance(error, EvaluationTimeout):
        return "timeout", str(error)
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return "oom", _describe(error)
    if isinstance(error, RuntimeError) and any(mark in str(error).lower() for mark in _OOM_MARKS):
        return "oom", _describe(error)
    if isinstance(error, IncompatibleModel):
        return "invalid", str(error)
    return "crash", _describe(error)


def estimate_training_bytes(model: nn.Module, task: Task, batch_size: int, limit: int | None = None) -> int:
    """A rough upper-bound estimate of the memory one training step needs.

    Parameter state is exact: weights, gradients and AdamW's two moments (4x parameter
    bytes). Activations are measured, not modelled: one no-grad forward at batch 1 sums
    the outputs of every leaf module, scaled to ``batch_size``, plus the float32 logits
    and their gradient. The forward is skipped when parameter state alone exceeds
    ``limit``, so absurd candidates are rejected without running them.
    """
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state_bytes = 4 * param_bytes
    if limit is not None and state_bytes > limit:
        return state_bytes

    leaf_output_bytes = 0

    def count(_module: nn.Module, _inputs: object, output: object) -> None:
        nonlocal leaf_output_bytes
        for tensor in _tensors(output):
            leaf_output_bytes += tensor.numel() * tensor.element_size()

    leaves = [m for m in model.modules() if next(m.children(), None) is None]
    hooks = [m.register_forward_hook(count) for m in leaves]
    try:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        ids = torch.zeros(1, task.seq_len, dtype=torch.int64, device=device)
        with torch.no_grad():
            model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    logits_bytes = 2 * batch_size * task.seq_len * task.vocab_size * 4
    return state_bytes + batch_size * leaf_output_bytes + logits_bytes


def model_width(model: nn.Module) -> int | None:
    """The residual width ``d_model`` of a decoded DOGMA phenotype, None for other models
    (which then train at the trainer's default rate unless ``train_options`` set one)."""
    width = getattr(getattr(model, "cfg", None), "d_model", None)
    return width if isinstance(width, int) else None


def _unpack_built(built: object) -> tuple[object, int | None, int | None]:
    """(model, vocab_size, max_len) from whatever form a builder returned."""
    if isinstance(built, tuple):
        return (*built, None, None)[:3]
    return built, None, None


def _tensors(output: object) -> Iterator[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        yield output
    elif isinstance(output, tuple | list):
        for item in output:
            yield from _tensors(item)
    elif isinstance(output, dict):
        for item in output.values():
            yield from _tensors(item)


def _describe(error: BaseException) -> str:
    message = str(error)
    if isinstance(error, ValueError) and type(error).__name__ == "GenomeError":
        return one_line(message)
    return one_line(f"{type(error).__name__}: {message}" if message else type(error).__name__)


def _bytes(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None
