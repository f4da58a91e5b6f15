"""Causal softmax attention: multi-head, grouped-query, multi-query, sliding window,
local:global interleaving; positions by RoPE or ALiBi (or none: the model adds learned or
sinusoidal embeddings to the stream).

For heads h, key-value heads g (h % g == 0) and head width e:

    q = x W_q  (h·e),   k = x W_k,  v = x W_v  (g·e each),
    o_t = Σ_{s ≤ t, t - s < window} softmax_s(q_t·k_s / √e) v_s,   y = o W_o,

each group of h/g query heads reading one key-value head (GQA; g = 1 is MQA, g = h is MHA).
With RoPE (Su et al., 2021) q and k are rotated by position: pairs (x_{2i}, x_{2i+1}) turn by
angle t·θ^{-2i/e}. Optional QK-norm RMS-normalises q and k per head before RoPE.
With ALiBi (Press et al., 2022) the score of head j gains -m_j·(t - s), with the geometric
slopes m_j = 2^{-8j/h} (j = 1..h) for h a power of two, and for other h the first 2^⌊log2 h⌋
of those plus every other slope of the 2·2^⌊log2 h⌋ sequence (the reference recipe).

Local:global interleaving (Gemma 2, Character.AI): with `global_every = n` and a window w,
copy c of the region (c = 0, 1, ...) attends globally when (c + 1) % n == 0 and within the
window otherwise, i.e. (n-1) local layers per global one.

Inference state: the KV cache, 2·g·e elements per token of context (up to the window).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params, no_weight_decay


@dataclass(frozen=True)
class AttentionConfig(BlockConfig, kind="attention", role="sequence"):
    heads: int
    kv_heads: int
    head_dim: int
    window: int  # 0 = full causal context (a global layer of an interleave too)
    qk_norm: bool
    rope: bool  # the structural `positions` is rope
    rope_theta: float
    alibi: bool  # the structural `positions` is alibi

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        """`global_every` is no field: it sets this layer's window (0 on global copies)."""
        params = dict(params)
        global_every = params.pop("global_every", 0)
        if global_every and (layer_idx + 1) % global_every == 0:
            params["window"] = 0
        return cls(
            d_model=structural["d_model"],
            bias=structural["bias"],
            rope=structural["positions"] == "rope",
            rope_theta=structural["rope_theta"],
            alibi=structural["positions"] == "alibi",
            **params,
        )

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
        # A sliding window's cache stops growing at `window` tokens: `state_elements` is
        # exact at every length, this per-token figure at lengths up to the window.
        return 2 * self.kv_heads * self.head_dim

    def state_elements(self, seq_len: int) -> int:
        kept = min(seq_len, self.window) if self.window else seq_len
        return 2 * self.kv_heads * self.head_dim * kept


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi head slopes (Press et al., 2022), float64 (heads,)."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (j + 1) / n) for j in range(n)]

    if heads & (heads - 1) == 0:
        return torch.tensor(geometric(heads), dtype=torch.float64)
    closest = 1 << (heads.bit_length() - 1)
    extra = geometric(2 * closest)[0::2][: heads - closest]
    return torch.tensor(geometric(closest) + extra, dtype=torch.float64)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, ...]:
    """cos, sin of shape (T, head_dim/2) for integer positions (T,)."""
    inv_freq = theta ** (
        -torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim
    )
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of x: (B, H, T, e) by the angles in cos, sin: (T, e/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(Mixer[AttentionConfig]):
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
            cos, sin = rope_tables(torch.arange(start, start + T, device=x.device), c.head_dim, c.rope_theta)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def _position_bias(self, delta: torch.Tensor) -> torch.Tensor | None:
        """Additive score bias (h, Tq, Tk) for query-key distances delta = t - s, or None."""
        if not self.cfg.alibi:
            return None
        slopes = alibi_slopes(self.cfg.heads).to(delta.device)
        return -slopes[:, None, None] * delta.to(torch.float64)

    def _mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """The attention mask for positions q_pos (Tq,) x k_pos (Tk,): None when plain
        causal attention over everything will do, else boolean or additive float."""
        delta = q_pos[:, None] - k_pos[None, :]
        allowed = delta >= 0
        if self.cfg.window:
            allowed = allowed & (delta < self.cfg.window)
        bias = self._position_bias(delta)
        if bias is None:
            return allowed
        return bias.masked_fill(~allowed, float("-inf")).to(dtype)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ) -> torch.Tensor:
        rep = self.cfg.heads // self.cfg.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    @property
    def has_position_bias(self) -> bool:
        return self.cfg.alibi

    def _plain_causal(self, T: int) -> bool:
        return not self.has_position_bias and not (self.cfg.window and self.cfg.window < T)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        B, T, _ = x.shape
        q, k, v = self._qkv(x, 0)
        if self._plain_causal(T):
            o = self._attend(q, k, v, None, causal=True)
        else:
            t = torch.arange(T, device=x.device)
            o = self._attend(q, k, v, self._mask(t, t, q.dtype), causal=False)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))

    def init_state(self, batch: int) -> dict[str, Any]:
        c, p = self.cfg, self.q_proj.weight
        empty = p.new_zeros(batch, c.kv_heads, 0, c.head_dim)
        return {"k": empty, "v": empty.clone(), "pos": 0}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D); appends this token's key and value to the cache."""
        pos = state["pos"]
        q, k, v = self._qkv(x_t[:, None], pos)
        k = torch.cat([state["k"], k], dim=2)
        v = torch.cat([state["v"], v], dim=2)
        if self.cfg.window:
            k, v = k[:, :, -self.cfg.window :], v[:, :, -self.cfg.window :]
        mask = None
        if self.has_position_bias:
            k_pos = torch.arange(pos - k.shape[2] + 1, pos + 1, device=x_t.device)
            mask = self._mask(torch.tensor([pos], device=x_t.device), k_pos, q.dtype)
        o = self._attend(q, k, v, mask, causal=False)
        y = self.o_proj(o.transpose(1, 2).reshape(x_t.shape[0], -1))
        return y, {"k": k, "v": v, "pos": pos + 1}

    def state_size(self, seq_len: int) -> int:
        """KV-cache elements per sequence after `seq_len` tokens."""
        return self.cfg.state_elements(seq_len)
