"""Train a model on a task under a step budget and score it on held-out batches.

:func:`train` runs the optimisation loop and returns :class:`TrainStats`; :func:`score`
measures held-out loss, accuracy and latency and returns :class:`ScoreStats`;
:func:`train_and_score` composes the two into the flat metrics dict that results carry.

The recipe is the usual small-transformer one: AdamW with weight decay on matrices only
(biases, norm gains and any parameter tagged ``_no_weight_decay = True`` are exempt),
linear warmup then cosine decay to a tenth of the peak rate, and global grad-norm
clipping. With the same seed, model initialisation and thread count, two runs on CPU
give identical metrics: the data comes from the task's seeded generators, never from
the global RNG.

``precision`` (``"fp32"`` default, ``"bf16"``, ``"auto"``; :mod:`evaluation.precision`):
under ``bf16`` the forward pass and the loss run in bfloat16 autocast, the backward pass
and the AdamW update on the float32 master weights outside it; scoring runs under the same
autocast, so a model is scored in the arithmetic it trained in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import EvaluationTimeout, IncompatibleModel, NonFiniteLoss
from .options import RECIPE, Recipe
from .precision import autocast
from .tasks import IGNORE_INDEX, Task
from .tasks.suite import Suite, normalised_accuracy, score_components
from .tasks.text import EnglishText

DEFAULT_BATCH_SIZE = RECIPE.batch_size  # the hyperparameters' defaults: `options.Recipe`
DEFAULT_LR = RECIPE.lr
DEFAULT_EVAL_BATCHES = 8
PACE_STEPS = 3  # training steps that measure a candidate's pace
PACE_SLACK = 10.0  # the pace-scaled limit: this many times the projected time
SCORE_STEPS = 8  # scoring's share of the projection, in training steps (an upper bound)


class Deadline:
    """A wall-clock limit that scales with the candidate's own pace, shared by training and
    scoring; ``limit_s=None`` never expires.

    It starts at ``limit_s`` seconds from ``start`` (``time.perf_counter``, default now).
    Once ``PACE_STEPS`` training steps are done (`paced`), it becomes at least
    ``PACE_SLACK`` times the whole evaluation's projected time at that pace,
    ``limit = max(limit_s, PACE_SLACK · t_K / K · (steps + SCORE_STEPS))`` with ``t_K`` the
    seconds the first K steps took: a machine under load measures a slower pace and grants
    more, so a healthy candidate is not stopped by the load it runs under. What it still stops
    is a candidate that slows ``PACE_SLACK``-fold after its first steps, or whose building and
    first steps exceed ``limit_s`` (a hung one). ``remaining()`` is what the worker's
    heartbeat reports, so that the driver waits as long as the worker does."""

    def __init__(self, limit_s: float | None, start: float | None = None) -> None:
        self.limit_s = limit_s
        self.start = time.perf_counter() if start is None else start

    def restart(self, limit_s: float | None) -> None:
        """Start again: ``limit_s`` seconds from now."""
        self.limit_s, self.start = limit_s, time.perf_counter()

    def check(self, progress: str) -> None:
        """Raise ``EvaluationTimeout(limit_s, progress)`` once the limit has passed."""
        if self.limit_s is not None and time.perf_counter() > self.start + self.limit_s:
            raise EvaluationTimeout(self.limit_s, progress)

    def paced(self, done: int, steps: int) -> None:
        """After training step ``done`` (1-based) of ``steps``: at ``PACE_STEPS``, grant the
        pace-scaled limit (class docstring)."""
        if self.limit_s is None or done != min(PACE_STEPS, steps):
            return
        per_step = (time.perf_counter() - self.start) / done
        self.limit_s = max(self.limit_s, PACE_SLACK * per_step * (steps + SCORE_STEPS))

    def remaining(self) -> float | None:
        """Seconds left before the limit (None: no limit)."""
        if self.limit_s is None:
            return None
        return self.start + self.limit_s - time.perf_counter()


@dataclass(frozen=True)
class TrainStats:
    """What :func:`train` measured.

    ``train_loss``: mean training loss (auxiliary loss included) over the last tenth of
    the steps, NaN for 0 steps; ``tokens``: tokens trained on (``steps * batch_size *
    seq_len``); ``compute_seconds``: forward, backward and update time only.
    """

    steps: int
    train_loss: float
    tokens: int
    compute_seconds: float

    @property
    def tokens_per_s(self) -> float:
        """Training throughput; 0.0 when nothing was timed (0 steps)."""
        return self.tokens / self.compute_seconds if self.compute_seconds else 0.0


@dataclass(frozen=True)
class ScoreStats:
    """What :func:`score` measured on the held-out batches: ``loss`` (mean cross-entropy
    per answer position), ``accuracy`` (fraction of answers predicted exactly),
    ``infer_latency_ms`` (mean forward time per batch), ``batches`` and, for a task with
    members (``evaluation.tasks.suite.Suite``), ``per_task``: each member's raw accuracy
    on its own held-out batches; for a task with several text sources (``bytelm_en``),
    ``per_source_loss``: each source's loss on its own held-out batches."""

    loss: float
    accuracy: float
    infer_latency_ms: float
    batches: int
    per_task: dict[str, float] = field(default_factory=dict)  # a suite's members: raw accuracy
    per_source_loss: dict[str, float] = field(default_factory=dict)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for matrices, none for vectors/scalars and tagged parameters."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        exempt = param.ndim < 2 or getattr(param, "_no_weight_decay", False)
        (no_decay if exempt else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_cosine(steps: int, warmup_steps: int, min_ratio: float = 0.1) -> Callable[[int], float]:
    """Learning-rate multiplier for step ``i``: linear warmup, then cosine to ``min_ratio``."""

    def multiplier(i: int) -> float:
        if i < warmup_steps:
            return (i + 1) / warmup_steps
        progress = (i - warmup_steps) / max(1, steps - warmup_steps)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return multiplier


def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the answer positions. logits: (B, T, V), targets: (B, T)."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def train(
    model: nn.Module,
    task: Task,
    steps: int,
    seed: int,
    *,
    recipe: Recipe = RECIPE,
    deadline: Deadline | None = None,
    device: torch.device | str | None = None,
    precision: str = "fp32",
    **hyperparameters: Any,
) -> TrainStats:
    """Train ``model`` in place on ``task`` for ``steps`` AdamW steps at peak rate ``lr``.

    The hyperparameters are ``recipe``'s (`evaluation.options.Recipe`; the defaults
    ``RECIPE``), any of them replaced by a keyword (``lr=1e-3``; another name is a
    ``TypeError``). Batches of ``batch_size`` sequences come from
    ``task.train_generator(seed)``; the global torch RNG is seeded with ``seed`` (dropout,
    stochastic paths). The rate warms up over ``warmup_fraction`` of the steps, then decays
    (:func:`warmup_cosine`).
    ``device`` defaults to that of the model's first parameter. Adds ``model.aux_loss()``
    (already weighted, e.g. MoE load balancing) to the loss when the model has it.

    Raises ``NonFiniteLoss`` on a NaN/inf loss or gradient norm, ``EvaluationTimeout``
    from ``deadline`` (checked between steps, so one slow step can overrun it), and
    ``IncompatibleModel`` when the first step's logits do not fit the task. ``precision``:
    the forward pass and the loss under :func:`evaluation.precision.autocast` (module
    docstring); gradients and weights stay in the parameters' dtype.
    """
    hp = replace(recipe, **hyperparameters)
    batch_size, lr, grad_clip = hp.batch_size, hp.lr, hp.grad_clip
    device = _resolve_device(model, device)
    torch.manual_seed(seed)  # dropout, stochastic paths: reproducible with the seed
    aux_loss = getattr(model, "aux_loss", None)
    aux_loss = aux_loss if callable(aux_loss) else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer, scheduler = None, None
    if params:
        # CUDA: one fused kernel for the whole update instead of a launch per tensor group.
        # CPU: the multi-tensor (foreach) update, which PyTorch only picks by itself on
        # accelerators: the same arithmetic as the per-tensor loop, bit for bit (so stored
        # CPU results still replay), at about 0.7x its time; the fused CPU kernel is faster
        # still but rounds differently (measured in docs/results.md, "Training throughput")
        cuda = device.type == "cuda"
        optimizer = torch.optim.AdamW(
            parameter_groups(model, hp.weight_decay),
            lr=lr,
            betas=hp.betas,
            fused=True if cuda else None,
            foreach=None if cuda else True,
        )
        warmup_steps = max(1, round(hp.warmup_fraction * steps))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(steps, warmup_steps))
    generator = task.train_generator(seed)
    tail = max(1, steps // 10)
    tail_losses: list[float] = []
    compute_seconds = 0.0

    model.train()
    for step in range(steps):
        inputs, targets = task.batch(generator, batch_size)
        inputs, targets = inputs.to(device), targets.to(device)
        tick = _now(device)
        with autocast(device, precision):
            logits = model(inputs)
            if step == 0:
                _check_logits(logits, inputs, task)
            loss = answer_loss(logits, targets)
            total = loss + aux_loss() if aux_loss is not None else loss
        loss_value = float(total.detach())
        if not math.isfinite(loss_value):
            raise NonFiniteLoss(f"training loss is {loss_value} at step {step}")
        if optimizer is not None and scheduler is not None:
            optimizer.zero_grad(set_to_none=True)
            total.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip, foreach=True))
            if not math.isfinite(grad_norm):
                raise NonFiniteLoss(f"gradient norm is {grad_norm} at step {step}")
            optimizer.step()
            scheduler.step()
        compute_seconds += _now(device) - tick
        if step >= steps - tail:
            tail_losses.append(loss_value)
        if deadline is not None:
            deadline.check(f"after {step + 1}/{steps} steps")
            deadline.paced(step + 1, steps)

    return TrainStats(
        steps=steps,
        train_loss=sum(tail_losses) / len(tail_losses) if tail_losses else float("nan"),
        tokens=steps * batch_size * task.seq_len,
        compute_seconds=compute_seconds,
    )


def score(
    model: nn.Module,
    task: Task,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    eval_batches: int = DEFAULT_EVAL_BATCHES,
    eval_seed: int = 0,
    deadline: Deadline | None = None,
    device: torch.device | str | None = None,
    precision: str = "fp32",
) -> ScoreStats:
    """Score ``model`` (in eval mode, without gradients) at the answer positions of
    ``task.eval_batches(eval_batches, batch_size, seed=eval_seed)``: the same held-out
    batches for every training seed. A suite scores each member on ``eval_batches // 2``
    batches of its own.

    Raises ``IncompatibleModel`` when the first batch's logits do not fit the task,
    ``EvaluationTimeout`` from ``deadline`` (checked after each batch) and
    ``NonFiniteLoss`` when the held-out loss is NaN/inf. ``precision``: the forward
    pass under :func:`evaluation.precision.autocast`; the loss on float32 logits.
    """
    device = _resolve_device(model, device)
    if isinstance(task, Suite):  # half the batches per member: 5 members, scoring stays cheap
        per_member = task.component_eval_batches(max(1, eval_batches // 2), batch_size, eval_seed)
        groups = dict(zip(task.member_names, per_member, strict=True))
    elif hasattr(task, "source_eval_batches"):  # a text of several sources: each its own loss
        groups = task.source_eval_batches(eval_batches, batch_size, seed=eval_seed)
    else:
        groups = {task.name: task.eval_batches(eval_batches, batch_size, seed=eval_seed)}
    loss_sum, correct, answers, forward_seconds, batches = 0.0, 0, 0, 0.0, 0
    per_task: dict[str, float] = {}
    per_source_loss: dict[str, float] = {}
    model.eval()
    with torch.no_grad():
        for name, held_out in groups.items():
            member_correct, member_answers, member_loss = 0, 0, 0.0
            for inputs, targets in held_out:
                inputs, targets = inputs.to(device), targets.to(device)
                tick = _now(device)
                with autocast(device, precision):
                    logits = model(inputs)
                forward_seconds += _now(device) - tick
                if batches == 0:
                    _check_logits(logits, inputs, task)
                batches += 1
                mask = targets != IGNORE_INDEX
                picked = logits[mask].float()
                member_loss += float(F.cross_entropy(picked, targets[mask], reduction="sum"))
                member_correct += int((picked.argmax(-1) == targets[mask]).sum())
                member_answers += int(mask.sum())
                if deadline is not None:
                    deadline.check("while scoring")
            correct, answers = correct + member_correct, answers + member_answers
            loss_sum += member_loss
            per_task[name] = member_correct / max(1, member_answers)
            per_source_loss[name] = member_loss / max(1, member_answers)
    loss = loss_sum / max(1, answers)
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"held-out loss is {loss}")
    return ScoreStats(
        loss=loss,
        accuracy=correct / max(1, answers),
        infer_latency_ms=1000.0 * forward_seconds / max(1, batches),
        batches=batches,
        per_task=per_task if isinstance(task, Suite) else {},
        per_source_loss=per_source_loss if len(groups) > 1 and not isinstance(task, Suite) else {},
    )


def train_and_score(
    model: nn.Module,
    task: Task,
    steps: int,
    seed: int,
    *,
    eval_batches: int = DEFAULT_EVAL_BATCHES,
    eval_seed: int = 0,
    time_limit_s: float | None = None,
    device: torch.device | str | None = None,
    precision: str = "fp32",
    deadline: Deadline | None = None,
    **hyperparameters: Any,
) -> dict[str, float]:
    """:func:`train` then :func:`score`, within one ``time_limit_s`` for both; the
    ``hyperparameters`` (``lr=...``, `evaluation.options.Recipe`) go to :func:`train`, the
    batch size to :func:`score` too.

    Returns metrics: ``loss`` and ``accuracy`` at the answer positions of
    ``eval_batches`` held-out batches (the same batches for every seed), ``train_loss``
    (mean of the last tenth of the steps), ``train_tokens`` (tokens trained on: ``steps *
    batch_size * task.seq_len``), ``train_tokens_per_s`` (forward, backward and update
    only), ``infer_latency_ms`` (mean forward time per held-out batch),
    ``wall_seconds``, ``steps``, ``chance_accuracy`` and the fitness the search selects
    on (:func:`quality_metrics`): ``quality``, and for a suite ``per_task`` (normalised)
    and ``per_task_accuracy`` (raw); for a text of several sources ``per_source_loss``.

    Raises what :func:`train` and :func:`score` raise: ``NonFiniteLoss``,
    ``EvaluationTimeout`` (once ``time_limit_s`` is exceeded, checked between steps and
    batches; the limit scales with the candidate's pace, `Deadline`) and ``IncompatibleModel``.
    ``precision`` goes to both (module docstring). ``deadline``: the caller's own `Deadline`
    (its limit reset to ``time_limit_s`` from now), to read ``remaining()`` from another thread.
    """
    if deadline is None:
        deadline = Deadline(time_limit_s)
    else:
        deadline.restart(time_limit_s)
    recipe = replace(RECIPE, **hyperparameters)
    device = _resolve_device(model, device)
    trained = train(
        model,
        task,
        steps,
        seed,
        recipe=recipe,
        deadline=deadline,
        device=device,
        precision=precision,
    )
    scored = score(
        model,
        task,
        batch_size=recipe.batch_size,
        eval_batches=eval_batches,
        eval_seed=eval_seed,
        deadline=deadline,
        device=device,
        precision=precision,
    )
    return {
        "loss": scored.loss,
        "accuracy": scored.accuracy,
        "chance_accuracy": task.chance_accuracy,
        **quality_metrics(task, scored),
        **({"per_source_loss": scored.per_source_loss} if scored.per_source_loss else {}),
        "train_loss": trained.train_loss,
        "train_tokens": trained.tokens,
        "train_tokens_per_s": trained.tokens_per_s,
        "train_compute_seconds": trained.compute_seconds,
        "infer_latency_ms": scored.infer_latency_ms,
        "wall_seconds": time.perf_counter() - deadline.start,
        "steps": trained.steps,
        **({"time_limit_seconds": deadline.limit_s} if deadline.limit_s is not None else {}),
    }


def quality_metrics(task: Task, scored: ScoreStats) -> dict[str, Any]:
    """The fitness of a scored model: ``quality`` is the normalised accuracy
    ``(accuracy - chance) / (1 - chance)`` (chance -> 0, perfect -> 1); for a suite, the mean
    of its members' normalised accuracies, with ``per_task`` and ``per_task_accuracy``; for
    ``text`` (the default), ``1 - loss / U`` (`evaluation.tasks.text`)."""
    if isinstance(task, Suite):
        return score_components(scored.per_task, task)
    if isinstance(task, EnglishText):
        return {"quality": task.quality_of_loss(scored.loss)}
    return {"quality": normalised_accuracy(scored.accuracy, task.chance_accuracy)}


def _resolve_device(model: nn.Module, device: torch.device | str | None) -> torch.device:
    """``device`` as a ``torch.device``; by default that of the model's first parameter."""
    if device is None:
        first = next(model.parameters(), None)
        return first.device if first is not None else torch.device("cpu")
    return torch.device(device)


def _check_logits(logits: object, inputs: torch.Tensor, task: Task) -> None:
    if not isinstance(logits, torch.Tensor):
        raise IncompatibleModel(f"model returned {type(logits).__name__}, not a logits tensor")
    B, T = inputs.shape
    if logits.ndim != 3 or tuple(logits.shape[:2]) != (B, T):
        raise IncompatibleModel(f"logits shape {tuple(logits.shape)} does not match inputs (B, T) = {(B, T)}")
    if logits.shape[-1] < task.vocab_size:
        raise IncompatibleModel(
            f"model predicts {logits.shape[-1]} tokens, task {task.name} needs {task.vocab_size}"
        )


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
