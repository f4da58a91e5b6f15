"""Giving memory back between candidates: one worker process trains many in turn."""

from __future__ import annotations

import gc

import torch


def free_device_memory() -> None:
    """Collect unreachable objects (a failed step's activations are held by the reference
    cycle of its traceback and frames) and return the CUDA caching allocator's free
    blocks to the driver, so the memory is there for the next candidate and for the other
    processes sharing the GPU. Does not initialise CUDA in a process that never used it."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
