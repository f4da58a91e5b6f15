"""Training precision: which arithmetic a candidate trains and is scored in.

``precision`` is ``"auto" | "fp32" | "bf16"``:

* ``fp32``: every op in float32 (the CPU default; bit-reproducible with the seed and thread
  count).
* ``bf16``: mixed precision. The forward pass (and the loss) runs under
  ``torch.autocast(device, torch.bfloat16)``: matrix products take bfloat16 operands and
  accumulate in float32, elementwise work follows its inputs. The master weights, gradients
  and AdamW's moments stay float32 (no loss scaling: bfloat16 has float32's exponent range),
  the cross-entropy is taken on float32 logits, and the sequence kernels (``kernels/``) run
  with autocast disabled on float32 copies of their inputs, so a scan's state accumulates in
  float32 (``kernels._dispatch.full_precision``).
* ``auto``: ``bf16`` on CUDA; on a CPU, what a short measured probe says pays on this
  machine (:func:`cpu_probe`): ``fp32`` where the CPU has no bfloat16 matrix instructions
  (AMX or AVX512-BF16: there bfloat16 products are emulated, 10-50x slower than float32),
  and where it has them, ``bf16`` only if a whole training step of a small language model at
  the search's width (:func:`step_gflops`: two attention + MLP blocks, ``d = 64``, 1,024
  tokens, the 257-way head and its cross-entropy) runs at least
  :data:`BF16_MARGIN` times faster under bfloat16 autocast than in float32, ``fp32``
  otherwise. The probe runs once per machine (a fraction of a second), in the first process
  that resolves a run's precision there; its verdict is stored (:func:`stored_verdict`) and
  every later process and run on the machine reads it, so the same seed trains in the same
  arithmetic under any load (every candidate of a run trains in one arithmetic, so the cache
  rule can key on it). Delete the file to measure again.

A result records the precision it trained in (``metrics["precision"]``, resolved, never
``auto``); a result without it trained in ``fp32`` (:data:`LEGACY_PRECISION`), as every
evaluation did before this option existed. The names live in the torch-free
``evaluation.options`` (a run's configuration checks them without loading torch).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .options import LEGACY_PRECISION, PRECISIONS

if TYPE_CHECKING:  # torch is imported where it runs: reading a store (`evolve report`) needs none
    import torch


#: How much faster bfloat16 must run the probe than float32 for ``auto`` to choose it on a
#: CPU: below this the casts and the rounding are not worth it.
BF16_MARGIN = 1.25
PROBE_WIDTH = 64  # the search's median width (`evolution.spaces.dogma.guards.SEED_WIDTHS`)
PROBE_TOKENS = 1024  # one training batch of the default fitness: 16 sequences of 64 bytes
PROBE_REPEATS = 8
PROBE_SEQ_LEN = 64  # the default fitness's sequences
PROBE_LAYERS = 2
PROBE_HEADS = 4
PROBE_VOCAB = 257  # bytes and an end-of-text token, as the text fitness's head


@dataclass(frozen=True)
class CpuProbe:
    """What ``auto`` resolves to on this CPU, and why: ``choice`` (``fp32`` | ``bf16``),
    ``reason`` (one line), and the probe model's training speed in each arithmetic (GFLOP/s;
    ``None`` where it was not timed)."""

    choice: str
    reason: str
    fp32_gflops: float | None = None
    bf16_gflops: float | None = None


def cpu_has_bf16_units() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX tiles or AVX512-BF16)."""
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


class _ProbeModel:
    """The probe's language model: byte embedding, ``layers`` pre-norm blocks of causal
    softmax attention (``heads`` heads, PyTorch's fused attention) and a ``4d`` GELU MLP, a
    final norm and a 257-way head; the shape of the search's commonest candidates."""

    def __init__(self, width: int, layers: int, seq_len: int) -> None:
        import torch

        nn = torch.nn
        self.width, self.layers, self.seq_len = width, layers, seq_len
        self.embed = nn.Embedding(PROBE_VOCAB, width)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(width),
                    "qkv": nn.Linear(width, 3 * width),
                    "out": nn.Linear(width, width),
                    "norm2": nn.LayerNorm(width),
                    "up": nn.Linear(width, 4 * width),
                    "down": nn.Linear(4 * width, width),
                }
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, PROBE_VOCAB)

    def parameters(self) -> list[Any]:
        modules = [self.embed, self.blocks, self.norm, self.head]
        return [p for m in modules for p in m.parameters()]

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy of ``tokens`` (B, T) on float32 logits."""
        import torch
        import torch.nn.functional as F

        x = self.embed(tokens[:, :-1])
        b, t, d = x.shape
        blocks: list[Any] = list(self.blocks)  # ModuleDicts, typed as plain Modules by torch
        for block in blocks:
            q, k, v = block["qkv"](block["norm1"](x)).view(b, t, 3, PROBE_HEADS, d // PROBE_HEADS).unbind(2)
            attended = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + block["out"](attended.transpose(1, 2).reshape(b, t, d))
            x = x + block["down"](F.gelu(block["up"](block["norm2"](x))))
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.reshape(-1, PROBE_VOCAB), tokens[:, 1:].reshape(-1).to(torch.long))

    def flops(self, tokens: int) -> float:
        """Training FLOPs of ``tokens`` tokens: ``3 · 2`` per multiply-add of the linear
        layers (forward, and the backward's two products), plus attention's ``QKᵀ`` and
        ``AV``: ``3 · 4 · T · d`` a token a layer."""
        d = self.width
        linear = self.layers * (3 * d * d + d * d + 8 * d * d) + d * PROBE_VOCAB
        return tokens * (6 * linear + self.layers * 12 * self.seq_len * d)


def step_gflops(bf16: bool, width: int = PROBE_WIDTH, tokens: int = PROBE_TOKENS) -> float:
    """GFLOP/s of one training step (forward, cross-entropy, backward) of the probe's
    two-block language model (:class:`_ProbeModel`) on ``tokens`` tokens in sequences of
    :data:`PROBE_SEQ_LEN`, under bfloat16 autocast when ``bf16``: casts, norms, softmax and
    the head included, as in a candidate's step. The best of :data:`PROBE_REPEATS` timed
    repeats after one warm-up.

    A bare MLP's matrix products (what this probe timed before) ran 1.5x faster in bf16 on an
    AVX512-BF16 CPU without AMX, where whole candidates trained 0.5-1.2x as fast (median
    0.83x; docs/results.md, "bf16 on a CPU without AMX"): the products are a minority of a
    small candidate's step."""
    import torch

    seq_len = min(PROBE_SEQ_LEN, tokens)
    gen = torch.Generator().manual_seed(0)
    model = _ProbeModel(width, PROBE_LAYERS, seq_len)
    batch = torch.randint(0, PROBE_VOCAB, (max(1, tokens // seq_len), seq_len + 1), generator=gen)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    best = float("inf")
    for repeat in range(PROBE_REPEATS + 1):
        tick = time.perf_counter()
        with context:
            loss = model.loss(batch)
        loss.backward()
        if repeat:
            best = min(best, time.perf_counter() - tick)
    return model.flops(batch.shape[0] * seq_len) / best / 1e9


PROBE_VERSION = 2  # the whole-model probe (1: the bare MLP); part of the stored verdict's key


@functools.cache
def cpu_probe() -> CpuProbe:
    """What ``auto`` is on this CPU (module docstring): measured once per machine and stored
    (:func:`stored_verdict`), so that every process and every run on it trains in one
    arithmetic; a probe timed anew by each driver could flip under load, and two runs of
    the same seed would then train in different arithmetics."""
    if not cpu_has_bf16_units():
        return CpuProbe("fp32", "no bfloat16 matrix instructions (AMX, AVX512-BF16) on this CPU")
    return stored_verdict(_measured_probe)


def _measured_probe() -> CpuProbe:
    fp32, bf16 = step_gflops(bf16=False), step_gflops(bf16=True)
    choice = "bf16" if bf16 >= BF16_MARGIN * fp32 else "fp32"
    verdict = "pays" if choice == "bf16" else f"is short of the {BF16_MARGIN}x it must gain"
    reason = f"bf16 autocast at {bf16:.0f} GFLOP/s vs fp32 {fp32:.0f} on the probe's model: {verdict}"
    return CpuProbe(choice, reason, fp32, bf16)


def probe_file() -> Path:
    """Where this machine's verdict is kept: ``$XDG_CACHE_HOME`` (else ``~/.cache``)
    ``/dogma_evolve/cpu_probe.json``."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "dogma_evolve" / "cpu_probe.json"


def _machine_key() -> str:
    """The CPU model, torch's version and instruction set, and the probe's version: a
    verdict is reused only where all four are the same."""
    import torch

    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model} | torch {torch.__version__} | {capability} | probe {PROBE_VERSION}"


def stored_verdict(measure: Callable[[], CpuProbe]) -> CpuProbe:
    """The verdict stored for this machine (:func:`probe_file`, :func:`_machine_key`), else
    ``measure()``'s, stored: the first process to store one wins (an exclusive link), and a
    process that loses reads the winner's. Where the file cannot be written (a read-only
    home) the measurement is used as it is."""
    path, key = probe_file(), _machine_key()
    found = _read_verdict(path, key)
    if found is not None:
        return found
    probe = measure()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump({"key": key, **asdict(probe)}, f)
        try:
            if path.exists() and _read_verdict(path, key) is None:  # another machine's or version's
                os.replace(f.name, path)
            else:
                os.link(f.name, path)
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(f.name)
    return _read_verdict(path, key) or probe


def _read_verdict(path: Path, key: str) -> CpuProbe | None:
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key or data.get("choice") not in ("fp32", "bf16"):
            return None
        return CpuProbe(
            data["choice"],
            str(data["reason"]) + " (stored)",
            data.get("fp32_gflops"),
            data.get("bf16_gflops"),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def resolve_precision(precision: str, device_type: str) -> str:
    """``precision`` for a run on ``device_type`` (``"cuda"``, ``"cpu"`` ...): ``auto`` is
    ``bf16`` on CUDA and :func:`cpu_probe`'s choice on a CPU (``fp32`` on any other device);
    ``fp32`` and ``bf16`` are themselves.

    Raises ``ValueError`` for anything outside :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "auto":
        if device_type == "cuda":
            return "bf16"
        return cpu_probe().choice if device_type == "cpu" else "fp32"
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The context the forward pass runs in: nothing for ``fp32``, bfloat16 autocast on
    ``device``'s type for ``bf16`` (``precision`` already resolved)."""
    if resolve_precision(precision, device.type) == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def pool_precision(precision: str, pool: object | None) -> str:
    """``precision`` resolved for the candidates ``pool`` trains: ``pool.device_type``
    (``EvaluationPool``: ``"cuda"`` when its cluster has GPUs) or, for a pool without one
    (in-process pools, ``None``), this process's CUDA availability, which is where such a
    pool trains."""
    device_type = getattr(pool, "device_type", None)
    if not isinstance(device_type, str):
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return resolve_precision(precision, device_type)


def precision_of(metrics: Mapping[str, Any] | None) -> str:
    """The precision a stored result trained in (:data:`LEGACY_PRECISION` when unrecorded)."""
    value = (metrics or {}).get("precision")
    return value if isinstance(value, str) else LEGACY_PRECISION


__all__ = [
    "BF16_MARGIN",
    "LEGACY_PRECISION",
    "PRECISIONS",
    "CpuProbe",
    "autocast",
    "cpu_has_bf16_units",
    "cpu_probe",
    "pool_precision",
    "precision_of",
    "resolve_precision",
    "probe_file",
    "step_gflops",
    "stored_verdict",
]
