"""Causal softmax attention: multi-head, grouped-query, multi-query, sliding window.

For heads h, key-value heads g (h % g == 0) and head width e:

    q = x W_q  (h·e),   k = x W_k,  v = x W_v  (g·e each),
    o_t = Σ_{s ≤ t, t - s < window} softmax_s(q_t·k_s / √e) v_s,   y = o W_o,

each group of h/g query heads reading one key-value head (GQA; g = 1 is MQA, g = h is MHA).
With RoPE (Su et al., 2021) q and k are rotated by position: pairs (x_{2i}, x_{2i+1}) turn by
angle t·θ^{-2i/e}. Optional QK-norm RMS-normalises q and k per head before RoPE.

Inference state: the KV cache, 2·g·e elements per token of context (up to the window).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from phenotype.blocks.base import BlockConfig, linear_params, no_weight_decay


@dataclass(frozen=True)
class AttentionConfig(BlockConfig):
    heads: int = 4
    kv_heads: int = 4
    head_dim: int = 16
    window: int = 0          # 0 = full causal context
    qk_norm: bool = False
    rope: bool = True
    rope_theta: float = 10_000.0

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: dict[str, Any]) -> AttentionConfig:
        return cls(d_model=structural["d_model"], bias=structural["bias"],
                   rope=structural["positions"] == "rope", rope_theta=structural["rope_theta"],
                   **params)

    def build(self) -> Attention:
        return Attention(self)

    def num_params(self) -> int:
        d, qd, kvd = self.d_model, self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = linear_params(d, qd, self.bias) + 2 * linear_params(d, kvd, self.bias)
        n += linear_params(qd, d, self.bias)
        return n + (2 * self.head_dim if self.qk_norm else 0)

    def flops_per_token(self, seq_len: int) -> int:
        d, qd, kvd = self.d_model, self.heads * self.head_dim, self.kv_heads * self.head_dim
        projections = 2 * (d * qd + 2 * d * kvd + qd * d)
        # Scores and values over the whole (masked) T x T square, as SDPA computes it.
        return projections + 4 * seq_len * qd

    def state_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, ...]:
    """cos, sin of shape (T, head_dim/2) for integer positions (T,)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of x: (B, H, T, e) by the angles in cos, sin: (T, e/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: AttentionConfig):
        super().__init__()
        self.cfg = cfg
        d, qd, kvd = cfg.d_model, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(d, qd, bias=cfg.bias)
        self.k_proj = nn.Linear(d, kvd, bias=cfg.bias)
        self.v_proj = nn.Linear(d, kvd, bias=cfg.bias)
        self.o_proj = nn.Linear(qd, d, bias=cfg.bias)
        if cfg.qk_norm:
            self.q_norm = nn.RMSNorm(cfg.head_dim)
            self.k_norm = nn.RMSNorm(cfg.head_dim)
            no_weight_decay(self.q_norm.weight, self.k_norm.weight)

    def _qkv(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
        """x: (B, T, D) at positions start..start+T-1 -> q (B,h,T,e), k, v (B,g,T,e)."""
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if c.rope:
            cos, sin = rope_tables(torch.arange(start, start + T, device=x.device),
                                   c.head_dim, c.rope_theta)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        rep = self.cfg.heads // self.cfg.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        B, T, _ = x.shape
        q, k, v = self._qkv(x, 0)
        if self.cfg.window and self.cfg.window < T:
            t = torch.arange(T, device=x.device)
            delta = t[:, None] - t[None, :]
            mask = (delta >= 0) & (delta < self.cfg.window)
            o = self._attend(q, k, v, mask, causal=False)
        else:
            o = self._attend(q, k, v, None, causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))

    def init_state(self, batch: int) -> dict[str, Any]:
        c, p = self.cfg, self.q_proj.weight
        empty = p.new_zeros(batch, c.kv_heads, 0, c.head_dim)
        return {"k": empty, "v": empty.clone(), "pos": 0}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D); appends this token's key and value to the cache."""
        q, k, v = self._qkv(x_t[:, None], state["pos"])
        k = torch.cat([state["k"], k], dim=2)
        v = torch.cat([state["v"], v], dim=2)
        if self.cfg.window:
            k, v = k[:, :, -self.cfg.window:], v[:, :, -self.cfg.window:]
        o = self._attend(q, k, v, None, causal=False)
        y = self.o_proj(o.transpose(1, 2).reshape(x_t.shape[0], -1))
        return y, {"k": k, "v": v, "pos": state["pos"] + 1}

    def state_size(self, seq_len: int) -> int:
        """KV-cache elements per sequence after `seq_len` tokens."""
        kept = min(seq_len, self.cfg.window) if self.cfg.window else seq_len
        return 2 * self.cfg.kv_heads * self.cfg.head_dim * kept
