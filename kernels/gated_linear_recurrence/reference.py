"""Gated linear recurrence in chunked parallel form, plain PyTorch.

Per (batch, head), with state S of size (dk, dv)::

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t

g_t is the log decay: one value per head and step, (B, H, T) (Mamba-2 SSD, retention), or one
per key channel, (B, H, T, dk) (gated linear attention). Within a chunk of c steps, with
G_t = sum_{r <= t} g_r counted from the chunk start::

    o_t   = (q_t * e^{G_t}) S_in + sum_{s <= t} (q_t * e^{G_t - G_s}) . k_s  v_s
    S_out = e^{G_c} S_in + sum_s (k_s * e^{G_c - G_s}) v_s^T

Only differences G_t - G_s with s <= t are exponentiated, so no factor exceeds 1 for g <= 0,
whatever the decay strength. Chunks run in sequence; the intra-chunk part is one masked matmul.
"""

from __future__ import annotations

import torch


def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shapes as in ``dogma_evolve.kernels.gated_linear_recurrence``; returns (o, final_state)."""
    dtype_in = q.dtype
    dtype = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32
    batch, heads, length, dk = q.shape
    per_channel = log_decay.dim() == 4
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    g = log_decay.to(dtype) if per_channel else log_decay.to(dtype)[..., None]  # (B,H,T,dk|1)
    S = initial_state.to(dtype) if initial_state is not None else q.new_zeros(batch, heads, dk, v.shape[-1])
    outs = []
    for start in range(0, length, chunk_size):
        window = slice(start, min(start + chunk_size, length))
        qc, kc, vc = q[:, :, window], k[:, :, window], v[:, :, window]
        G = g[:, :, window].cumsum(2)
        size = qc.shape[2]
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        diff = (G[:, :, :, None, :] - G[:, :, None, :, :]).masked_fill(
            ~causal[:, :, None], float("-inf")
        )  # (B, H, t, s, dk|1)
        if per_channel:
            scores = torch.einsum("bhti,bhsi,bhtsi->bhts", qc, kc, diff.exp())
        else:
            scores = (qc @ kc.transpose(-1, -2)) * diff[..., 0].exp()
        outs.append((qc * G.exp()) @ S + scores @ vc)
        G_last = G[:, :, -1:]
        S = G_last.exp().transpose(-1, -2) * S + (kc * (G_last - G).exp()).transpose(-1, -2) @ vc
    o = torch.cat(outs, dim=2) if outs else v.new_zeros(batch, heads, 0, v.shape[-1])
    return o.to(dtype_in), S
