"""Memory and one candidate: giving memory back between candidates (one worker process
trains many in turn, `free_device_memory`), and measuring the peak one candidate's
evaluation reached (`PeakMemory`).

The peak probe lives here rather than in a module of its own because `evaluation/` is at
the twenty modules per folder that `tests/test_layers.py` allows.
"""

from __future__ import annotations

import gc
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

import torch

#: What a peak counts: the process's resident set (a CPU evaluation) or the bytes the CUDA
#: caching allocator handed out to tensors (a CUDA evaluation).
PeakKind = Literal["rss", "cuda_allocated"]
#: Since when: this evaluation (the peak was reset as it began) or the process's lifetime
#: (the reset was impossible: not Linux, or no permission), a bound from above.
PeakScope = Literal["evaluation", "process"]

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


def free_device_memory(failed: bool = True) -> None:
    """Collect unreachable objects (a failed step's activations are held by the reference
    cycle of its traceback and frames) and return the CUDA caching allocator's free
    blocks to the driver, so the memory is there for the next candidate and for the other
    processes sharing the GPU. Does not initialise CUDA in a process that never used it.

    After a candidate that finished (``failed=False``) on a process without CUDA the full
    collection is skipped: nothing but a failure's traceback holds its tensors in a cycle,
    Python's own collector still runs, and a full pass costs ~0.15 s per candidate (a
    60-step candidate trains in 1-3 s here)."""
    if failed or torch.cuda.is_initialized():
        gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class PeakMemory:
    """A peak-memory probe around one evaluation: `start` it before the candidate is built,
    `metrics` after it is scored (or failed).

    On CUDA (``kind`` ``cuda_allocated``) the allocator's peak is reset at the start
    (``torch.cuda.reset_peak_memory_stats``) and read at the end
    (``torch.cuda.max_memory_allocated``): the most bytes this process's tensors held on
    the device meanwhile, weights, gradients, optimizer state and activations (not the
    allocator's cached reserve, nor the CUDA context). On the CPU (``kind`` ``rss``) it is
    the process's resident-set peak: on Linux the kernel's high-water mark is reset by
    writing ``5`` to ``/proc/self/clear_refs`` (Linux 4.0 and later) and read as ``VmHWM``
    from ``/proc/self/status``; it counts the whole process (interpreter, torch, the task's
    data), not the candidate alone. Where the reset is impossible the peak is the
    process's lifetime peak (``resource.getrusage(...).ru_maxrss``) and ``scope`` says
    ``process``, so nobody mistakes an earlier candidate's peak for this one's.
    """

    kind: PeakKind
    scope: PeakScope
    device: torch.device

    @classmethod
    def start(cls, device: torch.device | str) -> PeakMemory:
        """Reset the peak for ``device`` (its type picks the kind) and return the probe."""
        device = torch.device(device)
        if device.type == "cuda":
            try:
                torch.cuda.reset_peak_memory_stats(device)
                scope: PeakScope = "evaluation"
            except (RuntimeError, AssertionError):  # no usable CUDA: max_memory_allocated says
                scope = "process"
            return cls("cuda_allocated", scope, device)
        return cls("rss", "evaluation" if reset_process_peak() else "process", device)

    def peak_bytes(self) -> tuple[int, PeakScope] | None:
        """The peak in bytes since `start` (or over the process's life) and its scope; None
        where this platform offers no reading."""
        if self.kind == "cuda_allocated":
            try:
                return int(torch.cuda.max_memory_allocated(self.device)), self.scope
            except (RuntimeError, AssertionError):
                return None
        if self.scope == "evaluation":
            high_water = resident_high_water_bytes()
            if high_water is not None:
                return high_water, "evaluation"
        lifetime = lifetime_peak_bytes()
        return None if lifetime is None else (lifetime, "process")

    def metrics(self) -> dict[str, Any]:
        """``peak_memory_bytes``, ``peak_memory_kind`` and ``peak_memory_scope`` (module
        docstring); empty where no peak can be read."""
        peak = self.peak_bytes()
        if peak is None:
            return {}
        return {"peak_memory_bytes": peak[0], "peak_memory_kind": self.kind, "peak_memory_scope": peak[1]}


def reset_process_peak() -> bool:
    """Reset this process's resident-set high-water mark (``VmHWM``) to its current size:
    ``5`` written to ``/proc/self/clear_refs`` (Linux 4.0 and later; it clears nothing
    else). False where that is impossible: not Linux, no ``/proc``, no permission, or a
    ``/proc/self/status`` without ``VmHWM`` to read it back."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open(_CLEAR_REFS, "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return resident_high_water_bytes() is not None


def resident_high_water_bytes() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes (the kernel says kB, meaning KiB): the
    resident-set peak since the process began or since `reset_process_peak`; None where it
    cannot be read."""
    try:
        with open(_STATUS) as status:
            found = re.search(r"^VmHWM:\s+(\d+)\s+kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return None if found is None else int(found.group(1)) * 1024


def lifetime_peak_bytes() -> int | None:
    """The process's resident-set peak over its life, ``ru_maxrss`` of
    ``resource.getrusage(RUSAGE_SELF)`` in bytes (macOS gives bytes, Linux and the BSDs
    KiB); None without the ``resource`` module (Windows). On Linux it follows ``VmHWM``, so
    after a `reset_process_peak` it is no longer the lifetime peak: only the fallback where
    that reset failed reads it."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024
