"""The heartbeat board: a small Ray actor keeping the last beat of every attempt in flight on
its own clock, so no clock skew between machines reaches the driver's judgement.

Its own module, importing nothing of torch: the actor's Ray worker process imports only this
(a board beside `evaluation.worker`, which imports the trainer, cost every pool start a torch
import, about 1.5 CPU seconds).
"""

from __future__ import annotations

import time


class HeartbeatBoard:
    """Ray actor: the last heartbeat of every attempt in flight, on the actor's clock.

    An attempt is named by a token (a random hex string the driver makes per attempt);
    a worker names itself by the text of :func:`identity_text`.
    """

    def __init__(self) -> None:
        self._beats: dict[str, tuple[float, str, float | None]] = {}

    def beat(self, token: str, worker: str, remaining_s: float | None = None) -> None:
        self._beats[token] = (time.monotonic(), worker, remaining_s)

    def ages(self, tokens: list[str]) -> dict[str, tuple[float, str, float | None]]:
        """token -> (seconds since its last beat, worker, seconds its time limit had left at
        that beat, None when unknown) for tokens that have beaten."""
        now = time.monotonic()
        out = {}
        for t in tokens:
            if t in self._beats:
                at, worker, remaining = self._beats[t]
                out[t] = (now - at, worker, remaining)
        return out

    def forget(self, tokens: list[str]) -> None:
        for token in tokens:
            self._beats.pop(token, None)
