"""The Triton paths of ``gated_linear_recurrence``, behind one module: the fused recurrent form
(``fused_recurrent.py``, backend ``"triton"``: sequential over T, for decoding and short
sequences) and the chunked form (``chunk.py``, backend ``"chunk"``: parallel over time within
chunks, for training). An exported model carries them too, imported only where triton is.
"""

from __future__ import annotations

import torch

from . import chunk, fused_recurrent


def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None,
    chunk_size: int,
    chunked: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked form when ``chunked``, else the fused recurrent one (same contract)."""
    form = chunk if chunked else fused_recurrent
    return form.gated_linear_recurrence(q, k, v, log_decay, initial_state, chunk_size)
