"""Several candidates per GPU: the share of a GPU each candidate asks Ray for.

A candidate's share (Ray's fractional ``num_gpus``) is its estimated training memory with a
safety factor, plus a fixed cost per worker process, as a fraction of the GPU's memory,
rounded up to a grid of ``1/grid`` and capped at one GPU::

    share = min(1, max(1/grid, ceil(grid * (safety * estimate + process_bytes) / gpu_bytes) / grid))

``estimate`` is :func:`evaluation.evaluate.estimate_training_bytes` of the candidate built on
the ``meta`` device (nothing allocated, no arithmetic): weights, gradients and AdamW's two
moments exactly, activations as the float32 outputs of every leaf module at the training
batch, plus the logits and their gradient. Under bf16 most activations are half that, which
the estimate leaves as headroom. The safety factor (:data:`MEMORY_SAFETY`, 2) covers what a
leaf-output count misses: tensors an op saves inside a module (attention's softmax, a scan's
checkpoints), the caching allocator's rounding and fragmentation, transient workspaces;
:data:`PROCESS_BYTES` (1 GiB) is a worker's CUDA context, cuBLAS workspace and Triton's
loaded kernels, which every process pays once whatever it trains. On one 141 GB H200 the
grid of 16 packs up to 16 small candidates (8.8 GB each); one that needs more than the GPU
gets a whole GPU and fails as ``oom`` if it does not fit.

The pool also caps each candidate's CUDA allocator at its share less ``PROCESS_BYTES``
(``EvaluationPool.within_share``), so one that outgrows its estimate fails ``oom`` itself
instead of starving the others on its GPU.

The driver admits a candidate only while the shares in flight fit the cluster's GPUs
(:class:`evaluation.dispatch.Dispatch`), so no candidate waits inside Ray for a GPU while
its deadline runs. Ray places a fractional task on one GPU; on several GPUs the admitted sum
can exceed what one GPU has left, and such a task then waits in Ray (fragmentation; at a
grid of 16 this costs at most 1/16 of a GPU per GPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .evaluate import ModelBuilder, build_from_genome, estimate_training_bytes
from .result import EvalRequest
from .tasks import get_task

PACKING_GRID = 16
MEMORY_SAFETY = 2.0
PROCESS_BYTES = 1 << 30


def gpu_share(
    estimated_bytes: int,
    gpu_bytes: int,
    *,
    safety: float = MEMORY_SAFETY,
    process_bytes: int = PROCESS_BYTES,
    grid: int = PACKING_GRID,
) -> float:
    """The fraction of one GPU of ``gpu_bytes`` a candidate estimated at ``estimated_bytes``
    asks for: ``(safety * estimated_bytes + process_bytes) / gpu_bytes`` rounded up to a
    multiple of ``1 / grid``, at least ``1 / grid``, at most 1 (module docstring)."""
    if gpu_bytes <= 0 or grid < 1 or safety <= 0:
        raise ValueError(f"need gpu_bytes > 0, grid >= 1, safety > 0; got {gpu_bytes}, {grid}, {safety}")
    need = safety * max(0, estimated_bytes) + process_bytes
    steps = math.ceil(need * grid / gpu_bytes)
    return min(1.0, max(1, steps) / grid)


def estimate_request_bytes(request: EvalRequest, build_model: ModelBuilder | None = None) -> int:
    """``estimate_training_bytes`` of ``request``'s candidate at its training batch, built on
    the ``meta`` device so that the driver allocates and computes nothing.

    Raises what building or the meta forward raises (a genome that does not decode, an op
    without a meta implementation); the caller falls back to a default share.
    """
    task = get_task(request.task, **request.task_overrides)
    batch_size = request.batch_size or task.train_batch_size
    with torch.device("meta"):
        built: Any = (build_model or build_from_genome)(request.genome_yaml)
    model = built[0] if isinstance(built, tuple) else built
    if not isinstance(model, nn.Module):
        raise TypeError(f"builder returned {type(model).__name__}, not a Module")
    return estimate_training_bytes(model.to("meta"), task, batch_size)  # as `decode` places it


class GpuShares:
    """Each request's GPU share, estimated once per candidate and remembered.

    ``gpu_bytes``: memory of one GPU; ``fallback``: the share of a candidate whose estimate
    fails (a builder that needs real tensors, say).
    """

    def __init__(
        self,
        gpu_bytes: int,
        build_model: ModelBuilder | None = None,
        *,
        fallback: float,
        estimate: Callable[[EvalRequest, ModelBuilder | None], int] = estimate_request_bytes,
    ) -> None:
        self.gpu_bytes = gpu_bytes
        self.build_model = build_model
        self.fallback = fallback
        self.estimate = estimate
        self._shares: dict[tuple[Any, ...], float] = {}

    def __call__(self, request: EvalRequest) -> float:
        key = (
            request.genome_id,
            request.task,
            tuple(sorted(request.task_overrides.items())),
            request.batch_size,
        )
        if key not in self._shares:
            try:
                self._shares[key] = gpu_share(self.estimate(request, self.build_model), self.gpu_bytes)
            except Exception:  # noqa: BLE001 - a candidate the estimate cannot build still runs
                self._shares[key] = self.fallback
        return self._shares[key]


def probe_gpu_bytes() -> int:
    """Total memory of the GPU this process sees (run as a Ray task with ``num_gpus=1``):
    ``nvidia-smi``'s figure, which needs no CUDA context, else CUDA's."""
    import os
    import subprocess

    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", device, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return int(float(out.split()[0])) * 1024**2  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return int(torch.cuda.get_device_properties(0).total_memory)


__all__ = [
    "MEMORY_SAFETY",
    "PACKING_GRID",
    "PROCESS_BYTES",
    "GpuShares",
    "estimate_request_bytes",
    "gpu_share",
    "probe_gpu_bytes",
]
