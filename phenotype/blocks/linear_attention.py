"""Linear attention (Katharopoulos et al., 2020) and retention (RetNet, Sun et al., 2023):
attention whose T x T square factors into a matrix-valued state, so that training runs
`kernels.gated_linear_recurrence` (chunked) and inference carries a fixed-size state.

Both are instances of the gated linear recurrence, per head with key width e_k, value e_v:

    S_t = exp(g_t) S_{t-1} + k_t v_tᵀ   (e_k x e_v),      o_t = q_tᵀ S_t

Linear attention: feature map φ(z) = elu(z) + 1 (or relu(z)), g = 0, and the normaliser
rides along as an extra value column of ones:

    o_t = φ(q_t)ᵀ Σ_{s≤t} φ(k_s) v_sᵀ / (φ(q_t)ᵀ Σ_{s≤t} φ(k_s) + ε),   y = o W_o

Retention: q, k rotated by position (RoPE, the e^{inθ} of RetNet), k scaled by e_k^{-1/2},
a fixed per-head decay γ_j = 1 - 2^{-5-j} (g = log γ_j), outputs RMS-normalised per head
(no affine, as torchscale) and gated: y = (swish(x W_G) ⊙ norm(o)) W_O.

Inference state: S per head (plus the normaliser column): e_k·(e_v [+1]) per head, fixed.
The recurrence's work, 5 FLOPs per state element per token, is declared in
`extra_flops_per_token`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.attention import apply_rope, rope_tables
from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params

_EPS = 1e-6


def recurrence_flops(heads: int, dk: int, dv: int) -> int:
    """Per-token work of S_t = exp(g) S + k vᵀ, o = qᵀ S: decay, outer product, read-out."""
    return 5 * heads * dk * dv


def glr_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the gated linear recurrence: q, k (B, H, e_k), v (B, H, e_v),
    log_decay (B, H) or (B, H, e_k), state (B, H, e_k, e_v) -> (o (B, H, e_v), state)."""
    g = log_decay[..., None, None] if log_decay.dim() == 2 else log_decay[..., None]
    state = torch.exp(g) * state + k[..., :, None] * v[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


@dataclass(frozen=True)
class LinearAttentionConfig(BlockConfig, kind="linear_attention", role="sequence"):
    heads: int
    head_dim: int
    feature: str  # elu (elu + 1) | relu

    def build(self) -> LinearAttention:
        return LinearAttention(self)

    def num_params(self) -> int:
        inner = self.heads * self.head_dim
        return 3 * linear_params(self.d_model, inner, self.bias) + linear_params(
            inner, self.d_model, self.bias
        )

    def flops_per_token(self, seq_len: int) -> int:
        return 8 * self.d_model * self.heads * self.head_dim + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return recurrence_flops(self.heads, self.head_dim, self.head_dim + 1)

    def state_fixed(self) -> int:
        return self.heads * self.head_dim * (self.head_dim + 1)


class LinearAttention(Mixer[LinearAttentionConfig]):
    def __init__(self, cfg: LinearAttentionConfig):
        super().__init__()
        self.cfg = cfg
        d, inner = cfg.d_model, cfg.heads * cfg.head_dim
        self.q_proj = nn.Linear(d, inner, bias=cfg.bias)
        self.k_proj = nn.Linear(d, inner, bias=cfg.bias)
        self.v_proj = nn.Linear(d, inner, bias=cfg.bias)
        self.o_proj = nn.Linear(inner, d, bias=cfg.bias)

    def feature_map(self, z: torch.Tensor) -> torch.Tensor:
        return F.elu(z) + 1 if self.cfg.feature == "elu" else F.relu(z)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x: (B, T, D) -> φ(q), φ(k) (B, H, T, e), [v, 1] (B, H, T, e + 1)."""
        c, (B, T, _) = self.cfg, x.shape

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.view(B, T, c.heads, c.head_dim).transpose(1, 2)

        v = heads(self.v_proj(x))
        v = torch.cat([v, torch.ones_like(v[..., :1])], -1)
        return (self.feature_map(heads(self.q_proj(x))), self.feature_map(heads(self.k_proj(x))), v)

    def _out(self, o: torch.Tensor) -> torch.Tensor:
        """o: (B, H, T, e + 1) numerators and denominator -> (B, T, D)."""
        B, _, T, _ = o.shape
        o = o[..., :-1] / (o[..., -1:] + _EPS)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        import dogma_evolve.kernels as kernels

        q, k, v = self._qkv(x)
        o, _ = kernels.gated_linear_recurrence(q, k, v, q.new_zeros(q.shape[:3]))
        return self._out(o)

    def init_state(self, batch: int) -> torch.Tensor:
        c = self.cfg
        return self.q_proj.weight.new_zeros(batch, c.heads, c.head_dim, c.head_dim + 1)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: (B, D) -> (B, D); state: (B, H, e, e + 1)."""
        q, k, v = (z[:, :, 0] for z in self._qkv(x_t[:, None]))
        o, state = glr_step(q, k, v, q.new_zeros(q.shape[:2]), state)
        return self._out(o[:, :, None])[:, 0], state

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()


@dataclass(frozen=True)
class RetentionConfig(BlockConfig, kind="retention", role="sequence"):
    heads: int
    head_dim: int  # key width e_k
    v_head_dim: int  # value width e_v (RetNet uses 2·e_k)
    rope_theta: float  # structural

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        return cls(
            d_model=structural["d_model"],
            bias=structural["bias"],
            rope_theta=structural["rope_theta"],
            **params,
        )

    def build(self) -> Retention:
        return Retention(self)

    def num_params(self) -> int:
        d, qk, v = self.d_model, self.heads * self.head_dim, self.heads * self.v_head_dim
        return (
            2 * linear_params(d, qk, self.bias)
            + 2 * linear_params(d, v, self.bias)
            + linear_params(v, d, self.bias)
        )

    def flops_per_token(self, seq_len: int) -> int:
        d, qk, v = self.d_model, self.heads * self.head_dim, self.heads * self.v_head_dim
        return 2 * (2 * d * qk + 3 * d * v) + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return recurrence_flops(self.heads, self.head_dim, self.v_head_dim)

    def state_fixed(self) -> int:
        return self.heads * self.head_dim * self.v_head_dim


def retention_log_decay(heads: int) -> torch.Tensor:
    """log γ_j with γ_j = 1 - 2^{-5-j}, float64 (heads,)."""
    return torch.log1p(-(2.0 ** (-5.0 - torch.arange(heads, dtype=torch.float64))))


class Retention(Mixer[RetentionConfig]):
    def __init__(self, cfg: RetentionConfig):
        super().__init__()
        self.cfg = cfg
        d, qk, v = cfg.d_model, cfg.heads * cfg.head_dim, cfg.heads * cfg.v_head_dim
        self.q_proj = nn.Linear(d, qk, bias=cfg.bias)
        self.k_proj = nn.Linear(d, qk, bias=cfg.bias)
        self.v_proj = nn.Linear(d, v, bias=cfg.bias)
        self.g_proj = nn.Linear(d, v, bias=cfg.bias)
        self.o_proj = nn.Linear(v, d, bias=cfg.bias)

    def _qkv(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
        c, (B, T, _) = self.cfg, x.shape
        q = self.q_proj(x).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.heads, c.head_dim).transpose(1, 2) * c.head_dim**-0.5
        v = self.v_proj(x).view(B, T, c.heads, c.v_head_dim).transpose(1, 2)
        cos, sin = rope_tables(torch.arange(start, start + T, device=x.device), c.head_dim, c.rope_theta)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D), o: (B, H, T, e_v) -> (B, T, D)."""
        B, _, T, _ = o.shape
        o = F.rms_norm(o, (o.shape[-1],), eps=1e-6).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(F.silu(self.g_proj(x)) * o)

    def _log_decay(self, like: torch.Tensor) -> torch.Tensor:
        return retention_log_decay(self.cfg.heads).to(like)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        import dogma_evolve.kernels as kernels

        q, k, v = self._qkv(x, 0)
        log_decay = self._log_decay(q)[None, :, None].expand(q.shape[:3])
        o, _ = kernels.gated_linear_recurrence(q, k, v, log_decay)
        return self._out(x, o)

    def init_state(self, batch: int) -> dict[str, Any]:
        c = self.cfg
        return {"S": self.q_proj.weight.new_zeros(batch, c.heads, c.head_dim, c.v_head_dim), "pos": 0}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D); state: S (B, H, e_k, e_v) and the position."""
        q, k, v = (z[:, :, 0] for z in self._qkv(x_t[:, None], state["pos"]))
        log_decay = self._log_decay(q)[None].expand(q.shape[:2])
        o, s = glr_step(q, k, v, log_decay, state["S"])
        return self._out(x_t[:, None], o[:, :, None])[:, 0], {"S": s, "pos": state["pos"] + 1}

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
