"""Multi-head latent attention (DeepSeek-V2, 2024): attention whose KV cache is a low-rank
latent plus one small shared RoPE key.

With h heads, "no-position" width n, RoPE width r, value width e_v, KV rank c, query rank c'
(c' = 0: queries projected directly):

    c^Q_t = RMSNorm(x_t W_DQ)                   (c'),  q_t = c^Q_t W_UQ    (h·(n + r))
    [c^KV_t, k^R_t] = x_t W_DKV                 (c + r)
    c^KV_t = RMSNorm(c^KV_t),  [k^N_t, v_t] = c^KV_t W_UKV                  (h·(n + e_v))
    q_t = [q^N_t, RoPE_t(q^R_t)],   k_t = [k^N_t, RoPE_t(k^R_t)]  (k^R shared by all heads)
    o_t = Σ_{s ≤ t} softmax_s(q_t·k_s / √(n + r)) v_s,   y_t = o_t W_O

Inference state: the compressed cache (c^KV_s, RoPE(k^R_s)) for every past token, c + r
elements per token instead of 2·h·(n + e_v); `step` re-expands keys and values from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.attention import apply_rope, rope_tables
from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params, no_weight_decay


@dataclass(frozen=True)
class LatentAttentionConfig(BlockConfig, kind="mla", role="sequence"):
    heads: int
    kv_rank: int  # c: the cached latent's width
    q_rank: int  # c': 0 = no query compression (DeepSeek-V2-Lite)
    head_dim: int  # n: per-head query/key width without position
    rope_dim: int  # r: decoupled RoPE width (shared key)
    v_head_dim: int  # e_v
    rope_theta: float  # structural

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        return cls(
            d_model=structural["d_model"],
            bias=structural["bias"],
            rope_theta=structural["rope_theta"],
            **params,
        )

    def build(self) -> LatentAttention:
        return LatentAttention(self)

    @property
    def qk_dim(self) -> int:
        return self.head_dim + self.rope_dim

    def _linears(self) -> list[tuple[int, int]]:
        d, h = self.d_model, self.heads
        q = [(d, self.q_rank), (self.q_rank, h * self.qk_dim)] if self.q_rank else [(d, h * self.qk_dim)]
        return q + [
            (d, self.kv_rank + self.rope_dim),
            (self.kv_rank, h * (self.head_dim + self.v_head_dim)),
            (h * self.v_head_dim, d),
        ]

    def num_params(self) -> int:
        norms = self.kv_rank + self.q_rank
        return norms + sum(linear_params(i, o, self.bias) for i, o in self._linears())

    def flops_per_token(self, seq_len: int) -> int:
        dense = 2 * sum(i * o for i, o in self._linears())
        return dense + 2 * seq_len * self.heads * (self.qk_dim + self.v_head_dim)

    def state_per_token(self) -> int:
        return self.kv_rank + self.rope_dim


class LatentAttention(Mixer[LatentAttentionConfig]):
    def __init__(self, cfg: LatentAttentionConfig):
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d_model, cfg.heads
        if cfg.q_rank:
            self.q_down = nn.Linear(d, cfg.q_rank, bias=cfg.bias)
            self.q_norm = nn.RMSNorm(cfg.q_rank)
            self.q_up = nn.Linear(cfg.q_rank, h * cfg.qk_dim, bias=cfg.bias)
            no_weight_decay(self.q_norm.weight)
        else:
            self.q_proj = nn.Linear(d, h * cfg.qk_dim, bias=cfg.bias)
        self.kv_down = nn.Linear(d, cfg.kv_rank + cfg.rope_dim, bias=cfg.bias)
        self.kv_norm = nn.RMSNorm(cfg.kv_rank)
        self.kv_up = nn.Linear(cfg.kv_rank, h * (cfg.head_dim + cfg.v_head_dim), bias=cfg.bias)
        self.o_proj = nn.Linear(h * cfg.v_head_dim, d, bias=cfg.bias)
        no_weight_decay(self.kv_norm.weight)

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        if not self.cfg.rope_dim:
            return x
        cos, sin = rope_tables(
            torch.arange(start, start + x.shape[-2], device=x.device), self.cfg.rope_dim, self.cfg.rope_theta
        )
        return apply_rope(x, cos, sin)

    def _queries(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x: (B, T, D) -> q: (B, h, T, n + r)."""
        c, (B, T, _) = self.cfg, x.shape
        q = self.q_up(self.q_norm(self.q_down(x))) if c.q_rank else self.q_proj(x)
        q = q.view(B, T, c.heads, c.qk_dim).transpose(1, 2)
        return torch.cat([q[..., : c.head_dim], self._rope(q[..., c.head_dim :], start)], -1)

    def _latent(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, D) -> the cached pair: latent (B, T, c), rotated shared key (B, T, r)."""
        c = self.cfg
        kv = self.kv_down(x)
        k_rope = self._rope(kv[:, None, :, c.kv_rank :], start)[:, 0]
        return self.kv_norm(kv[..., : c.kv_rank]), k_rope

    def _keys_values(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c, (B, S, _) = self.cfg, latent.shape
        kv = self.kv_up(latent).view(B, S, c.heads, c.head_dim + c.v_head_dim).transpose(1, 2)
        k_rope = k_rope[:, None].expand(B, c.heads, S, c.rope_dim)
        return torch.cat([kv[..., : c.head_dim], k_rope], -1), kv[..., c.head_dim :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        B, T, _ = x.shape
        q = self._queries(x, 0)
        k, v = self._keys_values(*self._latent(x, 0))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))

    def init_state(self, batch: int) -> dict[str, Any]:
        p = self.kv_norm.weight
        return {
            "latent": p.new_zeros(batch, 0, self.cfg.kv_rank),
            "k_rope": p.new_zeros(batch, 0, self.cfg.rope_dim),
            "pos": 0,
        }

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D); appends the token's latent and RoPE key to the cache."""
        pos = state["pos"]
        latent, k_rope = self._latent(x_t[:, None], pos)
        latent = torch.cat([state["latent"], latent], 1)
        k_rope = torch.cat([state["k_rope"], k_rope], 1)
        k, v = self._keys_values(latent, k_rope)
        o = F.scaled_dot_product_attention(self._queries(x_t[:, None], pos), k, v)
        y = self.o_proj(o.transpose(1, 2).reshape(x_t.shape[0], -1))
        return y, {"latent": latent, "k_rope": k_rope, "pos": pos + 1}

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_elements(seq_len)
