"""How much lower than the command that starts them a local Ray cluster runs its workers.

Ray's own default starts every worker at niceness 15 above its raylet. Beside ordinary busy
processes (niceness 0) on a shared machine such a worker gets a few per cent of a core: a
search does not slow down, it stops (issue 44: a run of 47 s alone had not committed its
first generation after 28 minutes beside four busy processes on 2 cores). The default here
is 0: the workers run at the niceness of the `evolve` command (or script) that started the
cluster, and take their fair share beside other programs; ``nice evolve run ...`` makes the
whole search yield, and ``EVOLVE_WORKER_NICENESS=N`` (0-19) lowers the workers alone by N.
A cluster the pool joins (``--ray-address``) keeps the niceness it was started with.

Torch-free, so that the command line checks the variable before anything starts.
"""

from __future__ import annotations

import os

ENV = "EVOLVE_WORKER_NICENESS"
DEFAULT = 0
MAX = 19  # the Unix range: a niceness past 19 is 19


def worker_niceness() -> int:
    """The increment over the starting process's niceness for a local cluster's workers:
    ``EVOLVE_WORKER_NICENESS`` when set, else `DEFAULT`. Raises `ValueError` (one line)
    for anything but a whole number from 0 to 19."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX:
        raise ValueError(
            f"{ENV} must be a whole number from 0 to {MAX}  (how much lower workers run), not {text!r}"
        )
    return value


__all__ = ["DEFAULT", "ENV", "MAX", "worker_niceness"]
