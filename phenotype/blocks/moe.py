"""Mixture of experts (Shazeer et al., 2017; Switch, Fedus et al., 2022; Mixtral, 2024):

    p_t = softmax(x_t W_r)                        router, bias-free (E experts)
    S_t = top-k indices of p_t,  g_{t,e} = p_{t,e} / Σ_{e'∈S_t} p_{t,e'}   (k > 1; k = 1: p)
    y_t = Σ_{e ∈ S_t} g_{t,e} · expert_e(x_t)  +  shared(x_t)              (shared optional)

Only the routed tokens pass through an expert (gather, expert, weighted scatter-add), so
compute per token is k experts + the shared expert + the router. Load balancing (Switch):

    L_aux = E · Σ_e f_e · P_e,   f_e = (tokens with e in their top-k) / tokens,  P_e = mean_t p_{t,e}

which is k under uniform routing and E when every token collapses onto one expert; the
layer keeps `aux_weight · L_aux` of its last forward in `last_aux_loss`, and
`DogmaModel.aux_loss()` sums them for the trainer. Stateless per token (channel mixer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, ChannelMixer
from dogma_evolve.phenotype.blocks.mlp import GeGLUConfig, MLPConfig, SwiGLUConfig


@dataclass(frozen=True)
class MoEConfig(BlockConfig, kind="moe", role="channel"):
    experts: int
    top_k: int
    hidden: int  # per expert
    expert: str  # swiglu | geglu | gelu | relu (an MLP with that activation)
    shared: int  # shared experts, fused into one of width shared * hidden
    aux_weight: float

    def build(self) -> MoE:
        return MoE(self)

    def expert_config(self, hidden: int) -> BlockConfig:
        if self.expert == "swiglu":
            return SwiGLUConfig(self.d_model, self.bias, hidden)
        if self.expert == "geglu":
            return GeGLUConfig(self.d_model, self.bias, hidden)
        return MLPConfig(self.d_model, self.bias, hidden, self.expert)

    def _shared_params(self) -> int:
        return self.expert_config(self.shared * self.hidden).num_params() if self.shared else 0

    def num_params(self) -> int:
        router = self.d_model * self.experts
        return router + self.experts * self.expert_config(self.hidden).num_params() + self._shared_params()

    def active_params(self) -> int:
        router = self.d_model * self.experts
        return router + self.top_k * self.expert_config(self.hidden).num_params() + self._shared_params()

    def flops_per_token(self, seq_len: int) -> int:
        shared = self.expert_config(self.shared * self.hidden).flops_per_token(seq_len) if self.shared else 0
        return (
            2 * self.d_model * self.experts
            + shared
            + self.top_k * self.expert_config(self.hidden).flops_per_token(seq_len)
        )


def load_balancing_loss(probs: torch.Tensor, top_idx: torch.Tensor) -> torch.Tensor:
    """Switch loss E·Σ f_e P_e; probs: (N, E) router probabilities, top_idx: (N, k)."""
    experts = probs.shape[-1]
    dispatched = F.one_hot(top_idx, experts).sum(-2).to(probs.dtype)  # (N, E) in {0, 1}
    return experts * (dispatched.mean(0) * probs.mean(0)).sum()


class MoE(ChannelMixer[MoEConfig]):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.d_model, cfg.experts, bias=False)
        expert = cfg.expert_config(cfg.hidden)
        self.experts = nn.ModuleList(expert.build() for _ in range(cfg.experts))
        self.shared = cfg.expert_config(cfg.shared * cfg.hidden).build() if cfg.shared else None
        self.last_aux_loss: torch.Tensor | None = None

    def _routed(
        self, flat: torch.Tensor, top_p: torch.Tensor, top_idx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every (token, slot) assignment through its expert, weighted by its gate: the token
        of each row and the rows (assignments, D), expert by expert and, within an expert, in
        token order (a stable sort of the flattened assignments: each expert sees the rows
        `(top_idx == e).nonzero()` gives, and one index_add sums them in expert order)."""
        k, assigned = self.cfg.top_k, top_idx.flatten()
        order = assigned.argsort(stable=True)
        token, rows = order // k, flat.index_select(0, order // k)
        counts = torch.bincount(assigned, minlength=self.cfg.experts).tolist()
        ys = [
            expert(part[None])[0]
            for expert, part, n in zip(self.experts, rows.split(counts), counts, strict=True)
            if n
        ]
        y = torch.cat(ys) * top_p.flatten()[order, None]
        return token, y.to(flat.dtype)  # bf16 under autocast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D); records the weighted balancing loss."""
        flat = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(flat), dim=-1)
        top_p, top_idx = probs.topk(self.cfg.top_k, dim=-1)
        if self.cfg.top_k > 1:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        if flat.is_meta:  # no data to route: shapes only, k·N assignments spread evenly
            n = flat.shape[0] * self.cfg.top_k
            for e, expert in enumerate(self.experts):
                count = n // self.cfg.experts + (e < n % self.cfg.experts)
                expert(flat.new_empty(1, count, flat.shape[-1]))
        if not flat.is_meta:
            out = out.index_add(0, *self._routed(flat, top_p, top_idx))
        if self.shared is not None:
            out = out + self.shared(flat[None])[0]
        self.last_aux_loss = self.cfg.aux_weight * load_balancing_loss(probs, top_idx)
        return out.view_as(x)
