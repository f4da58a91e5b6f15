"""Gated recurrences' training path: the GRU (``gru``) as one fused C++ call forward and one
backward on CPU.

Backends: ``"torch"`` (reference.py, a per-step loop differentiated by autograd) and
``"cpu"`` (cpu.py, ``recurrent.cpp``: one GEMM over all steps for the input projection, one
small GEMM a step, the gate arithmetic in C++ loops, the backward written out). ``"auto"``
picks ``"cpu"`` where :func:`gru_fast_path` holds, else the reference. There is no Triton path:
on CUDA the blocks keep ``nn.GRU`` (cuDNN). The blocks themselves (`FusedRecurrence`) fall back
to ``nn.GRU``, not to the reference, wherever :func:`gru_fast_path` does not hold.
"""

from __future__ import annotations

import torch

from .._dispatch import BACKENDS, full_precision, opaque_to_compile, plain_ops_only
from . import reference

__all__ = ["gru", "gru_fast_path"]


def gru_fast_path(*tensors: torch.Tensor) -> bool:
    """True where ``backend="auto"`` takes the C++ kernel: every tensor on the CPU, all float32
    or all float64, outside ``torch.export``/``torch.compile``/``reference_only``
    (`_dispatch.plain_ops_only`), and the kernel built (building it now if needed)."""
    if plain_ops_only():
        return False
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or not dtypes <= {torch.float32, torch.float64}:
        return False
    if any(t.device.type != "cpu" for t in tensors):
        return False
    from . import cpu as cpu_path

    return cpu_path.available()


def _check(
    x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
) -> None:
    if x.dim() != 3:
        raise ValueError(f"x must be (B, T, D), got {tuple(x.shape)}")
    hidden = w_hh.shape[-1]
    gates = 3 * hidden
    if w_ih.shape != (gates, x.shape[2]) or w_hh.shape != (gates, hidden):
        raise ValueError(
            f"weight_ih must be (3H, D)=({gates}, {x.shape[2]}) and weight_hh (3H, H)=({gates}, {hidden}), "
            f"got {tuple(w_ih.shape)}, {tuple(w_hh.shape)}"
        )
    if b_ih.shape != (gates,) or b_hh.shape != (gates,):
        raise ValueError(
            f"bias_ih and bias_hh must be (3H,)=({gates},), got {tuple(b_ih.shape)}, {tuple(b_hh.shape)}"
        )


@opaque_to_compile
@full_precision
def gru(
    x: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
    backend: str = "auto",
) -> torch.Tensor:
    """Single-layer, batch-first GRU from a zero state, as ``nn.GRU(D, H, batch_first=True)``
    with that module's parameters (gates [r, z, n])::

        r, z = σ(x_t W_{r,z}^T + b_i{r,z} + h_{t-1} U_{r,z}^T + b_h{r,z})
        n = tanh(x_t W_n^T + b_in + r ⊙ (h_{t-1} U_n^T + b_hn))
        h_t = (1 - z) ⊙ n + z ⊙ h_{t-1}

    Args:
        x: (B, T, D). weight_ih: (3H, D). weight_hh: (3H, H). bias_ih, bias_hh: (3H,).
        backend: "auto", "torch" or "cpu" (the C++ kernel; it must build).

    Returns:
        every state h_t: (B, T, H) in x's dtype (computed in float64 when an input is float64,
        else float32).
    """
    _check(x, weight_ih, weight_hh, bias_ih, bias_hh)
    if backend not in BACKENDS or backend in ("triton", "chunk"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'cpu' for the GRU, got {backend!r}")
    tensors = (x, weight_ih, weight_hh, bias_ih, bias_hh)
    if backend == "cpu" or (backend == "auto" and gru_fast_path(*tensors)):
        from . import cpu as cpu_path

        if not cpu_path.available():
            raise RuntimeError("backend='cpu': the C++ recurrent kernel could not be built")
        return cpu_path.gru(*tensors)
    return reference.gru(*tensors)
