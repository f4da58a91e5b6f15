"""Plain-data requests and results: what crosses the process boundary to Ray workers.

Both are dataclasses of builtins only (str, int, float, dict), so they pickle safely and
convert to and from JSON-ready dicts for the store.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

# The statuses are the store's (its schema checks them); the store does not import this
# package, so there is no cycle. The Literal repeats them for type checkers, and a test
# keeps the two equal.
from dogma_evolve.store import EVALUATION_STATUSES

# "filtered" is set by the engine's pre-filter (the genome cannot beat chance), never by a pool
Status = Literal["ok", "invalid", "nan", "oom", "timeout", "crash", "filtered"]
STATUSES: tuple[str, ...] = EVALUATION_STATUSES  # the name this package's callers use
MAX_REASON_CHARS = 500


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Collapse whitespace to single spaces and cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class EvalRequest:
    """One candidate to train and score.

    ``fidelity`` is the number of training steps. ``timeout_s=None`` means no limit when
    called directly and the pool's default inside ``EvaluationPool``.
    ``max_memory_bytes`` rejects (as ``oom``) a candidate whose estimated training
    memory exceeds it, before any training; on CUDA it also caps the allocator.
    ``precision`` is the arithmetic it trains in (``evaluation.precision``); it is not part
    of the natural key, the result records it as ``metrics["precision"]``.
    """

    genome_yaml: str
    genome_id: str
    task: str
    fidelity: int
    seed: int = 0
    timeout_s: float | None = None
    task_overrides: dict[str, Any] = field(default_factory=dict)
    max_memory_bytes: int | None = None
    batch_size: int | None = None  # None: the task's train_batch_size
    device: str | None = None  # None: CUDA when visible, else CPU
    return_weights: bool = False  # ship the trained weights back (safetensors bytes)
    precision: str = "auto"  # auto | fp32 | bf16 (evaluation.precision); auto: bf16 on CUDA, measured on CPU
    # a user's block kinds the genome may use, pinned MODULE#FINGERPRINT (`phenotype.plugins`):
    # the worker imports them before it decodes, refusing other code
    plugins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "plugins", tuple(self.plugins))  # JSON gives a list back

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalRequest:
        return cls(**_known_fields(cls, data))


@dataclass(frozen=True)
class EvalResult:
    """The outcome of one request: metrics when ``status == 'ok'``, otherwise a typed
    failure with a one-line ``reason`` (metrics then hold whatever was known, e.g. params).

    ``genome_id, task, fidelity, seed`` (with ``task_overrides``) are the request's natural
    key, so a result can be stored without the request at hand.
    """

    genome_id: str
    task: str
    fidelity: int
    seed: int
    status: Status
    reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0
    task_overrides: dict[str, Any] = field(default_factory=dict)
    weights: bytes | None = field(default=None, repr=False)  # with request.return_weights

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        object.__setattr__(self, "reason", one_line(self.reason))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def for_request(
        cls,
        request: EvalRequest,
        status: Status,
        reason: str = "",
        metrics: dict[str, Any] | None = None,
        wall_seconds: float = 0.0,
    ) -> EvalResult:
        return cls(
            genome_id=request.genome_id,
            task=request.task,
            fidelity=request.fidelity,
            seed=request.seed,
            status=status,
            reason=reason,
            metrics=dict(metrics or {}),
            wall_seconds=wall_seconds,
            task_overrides=dict(request.task_overrides),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        """Inverse of ``to_dict``; keys this version does not know are ignored."""
        return cls(**_known_fields(cls, data))


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in data.items() if key in names}
