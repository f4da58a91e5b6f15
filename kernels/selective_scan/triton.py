"""The Triton paths of ``selective_scan``, behind one module: the fused recurrent kernel
(``fused_recurrent.py``, backend ``"triton"``: sequential over L, for decoding and short
sequences) and the chunked one (``chunk.py``, backend ``"chunk"``: parallel over time within
chunks, for training). An exported model carries them too, imported only where triton is.
"""

from __future__ import annotations

import torch

from . import chunk, fused_recurrent


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    initial_state: torch.Tensor | None = None,
    chunked: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``reference.selective_scan``; the chunked kernel when ``chunked``."""
    args = (u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, initial_state)
    return (chunk if chunked else fused_recurrent).selective_scan(*args)
