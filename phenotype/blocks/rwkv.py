"""RWKV-4 (Peng et al., 2023): time mixing (a T kind) and channel mixing (an A kind).

Both mix each token with the previous one ("token shift"), x̃ = μ ⊙ x_t + (1 - μ) ⊙ x_{t-1}.

Time mixing, channels c = 1..D, decay w = exp(w_raw) ≥ 0 and bonus u per channel:

    k = x̃_k W_k,  v = x̃_v W_v,  r = σ(x̃_r W_r)
    wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u + k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i} + e^{u + k_t})
    y_t = (r_t ⊙ wkv_t) W_o

Training runs the whole sequence through `kernels.wkv`; `step` carries the numerically
stable triple (a, b, p) of the RWKV kernels — a = Σ e^{…-p} v, b = Σ e^{…-p}, p the running
maximum exponent — plus the previous input: 4·D state elements. The WKV work (≈ 12 FLOPs
per channel per token) is declared in `extra_flops_per_token`.

Channel mixing, hidden F:

    y_t = σ(x̃_r W_r) ⊙ (relu(x̃_k W_k)² W_v),        state: the previous input (D).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, no_weight_decay


def _shift(x: torch.Tensor) -> torch.Tensor:
    """x: (B, T, D) -> x_{t-1} with zeros before the first token."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)


def _ramp(d: int, power: float) -> torch.Tensor:
    return (torch.arange(d, dtype=torch.float32) / max(d - 1, 1)) ** power


@dataclass(frozen=True)
class RWKVTimeMixConfig(BlockConfig, kind="rwkv", role="sequence"):
    def build(self) -> RWKVTimeMix:
        return RWKVTimeMix(self)

    def num_params(self) -> int:
        return 4 * self.d_model * self.d_model + 5 * self.d_model

    def flops_per_token(self, seq_len: int) -> int:
        return 8 * self.d_model * self.d_model + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return 12 * self.d_model

    def state_fixed(self) -> int:
        return 4 * self.d_model


class RWKVTimeMix(Mixer[RWKVTimeMixConfig]):
    def __init__(self, cfg: RWKVTimeMixConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        # RWKV-4's initialisation at mid depth: decays spread over channels, a zigzag bonus.
        self.time_decay = nn.Parameter(-5 + 8 * _ramp(d, 1.35))
        zigzag = torch.tensor([((i + 1) % 3 - 1) * 0.5 for i in range(d)])
        self.time_first = nn.Parameter(torch.full((d,), 0.3).log() + zigzag)
        self.time_mix_k = nn.Parameter(_ramp(d, 0.5))
        self.time_mix_v = nn.Parameter(_ramp(d, 0.5) + 0.15)
        self.time_mix_r = nn.Parameter(_ramp(d, 0.25))
        self.key = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)
        self.output = nn.Linear(d, d, bias=False)
        no_weight_decay(self.time_decay, self.time_first, self.time_mix_k, self.time_mix_v, self.time_mix_r)

    def _krv(self, x: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def mix(mu: torch.Tensor) -> torch.Tensor:
            return x * mu + prev * (1 - mu)

        return (
            self.key(mix(self.time_mix_k)),
            torch.sigmoid(self.receptance(mix(self.time_mix_r))),
            self.value(mix(self.time_mix_v)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        import dogma_evolve.kernels as kernels

        k, r, v = self._krv(x, _shift(x))
        return self.output(r * kernels.wkv(torch.exp(self.time_decay), self.time_first, k, v))

    def init_state(self, batch: int) -> dict[str, torch.Tensor]:
        z = self.key.weight.new_zeros(batch, self.cfg.d_model)
        return {"x": z, "a": z.clone(), "b": z.clone(), "p": torch.full_like(z, -1e38)}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D): one step of the stable WKV recurrence."""
        k, r, v = self._krv(x_t, state["x"])
        a, b, p = state["a"], state["b"], state["p"]
        now = self.time_first + k
        top = torch.maximum(p, now)
        e_past, e_now = torch.exp(p - top), torch.exp(now - top)
        wkv = (e_past * a + e_now * v) / (e_past * b + e_now)
        decayed = p - torch.exp(self.time_decay)
        top = torch.maximum(decayed, k)
        e_past, e_now = torch.exp(decayed - top), torch.exp(k - top)
        state = {"x": x_t, "a": e_past * a + e_now * v, "b": e_past * b + e_now, "p": top}
        return self.output(r * wkv), state

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()


@dataclass(frozen=True)
class RWKVChannelMixConfig(BlockConfig, kind="rwkv_channel", role="channel"):
    hidden: int

    def build(self) -> RWKVChannelMix:
        return RWKVChannelMix(self)

    def num_params(self) -> int:
        d = self.d_model
        return 2 * d * self.hidden + d * d + 2 * d

    def flops_per_token(self, seq_len: int) -> int:
        d = self.d_model
        return 2 * (2 * d * self.hidden + d * d)

    def state_fixed(self) -> int:
        return self.d_model


class RWKVChannelMix(Mixer[RWKVChannelMixConfig]):
    def __init__(self, cfg: RWKVChannelMixConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.time_mix_k = nn.Parameter(_ramp(d, 0.5))
        self.time_mix_r = nn.Parameter(_ramp(d, 0.5))
        self.key = nn.Linear(d, cfg.hidden, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(cfg.hidden, d, bias=False)
        no_weight_decay(self.time_mix_k, self.time_mix_r)

    def _mix(self, x: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        xk = x * self.time_mix_k + prev * (1 - self.time_mix_k)
        xr = x * self.time_mix_r + prev * (1 - self.time_mix_r)
        return torch.sigmoid(self.receptance(xr)) * self.value(torch.relu(self.key(xk)) ** 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        return self._mix(x, _shift(x))

    def init_state(self, batch: int) -> torch.Tensor:
        return self.key.weight.new_zeros(batch, self.cfg.d_model)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: (B, D) -> (B, D); state: the previous input."""
        return self._mix(x_t, state), x_t

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
