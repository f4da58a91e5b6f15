"""The regulation gate: how regulatory regions express or silence coding regions per token.

A regulatory region with C:gate bases reads the residual stream x at its place in the
genome and emits a signal r_t = silu(x_t W_r + b_r), the concatenation of its gates'
outputs. Each `activates` / `represses` edge to a coding region turns the signal into a
per-token gate

    activates:  g_t = σ(w·r_t + b)        represses:  g_t = 1 - σ(w·r_t + b)

and every residual update of the target region (all its copies) is scaled by the product
of its incoming gates: x ← x + g_t · strength · f(norm(x)). Causal: g_t reads x_t only.

Hierarchies. An `activates` / `represses` edge may also run from a regulatory region Q to a
later regulatory region R that emits a signal: Q then gates R's signal, with the same
per-edge gate read from Q's signal,

    ŝ_R,t = s_R,t · Π_{Q→R} G_QR(ŝ_Q,t),    G_QR(r) = σ(w_QR·r + b_QR)  (activates)
                                                     = 1 - σ(w_QR·r + b_QR)  (represses)

where s_R,t is R's own signal (above), ŝ_R,t = s_R,t for a region nobody regulates, and
every edge, to a coding region or to another regulator, reads the gated ŝ of its source.
Edges point downstream, so ŝ of every source is known when R runs, and cascades of any
depth form: r1 → r2 → c makes c's gate σ(w·(s_r2 · G_12(s_r1)) + b). A fully repressed
regulator (G → 0) sends the zero signal, so its targets fall back to their bias gate
σ(b). Only the signal is gated: an `allosteric` router of R is not. Each such edge costs
`edge_gate_params(width of ŝ_Q)` parameters and 2·width FLOPs per token, as for a coding
target (the products are elementwise, which a FLOP counter does not count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, ChannelMixer, linear_params


@dataclass(frozen=True)
class GateConfig(BlockConfig, kind="gate", role="regulatory"):
    hidden: int

    def build(self) -> RegulationGate:
        return RegulationGate(self)

    def num_params(self) -> int:
        return linear_params(self.d_model, self.hidden, True)

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * self.d_model * self.hidden


class RegulationGate(ChannelMixer[GateConfig]):
    def __init__(self, cfg: GateConfig):
        super().__init__()
        self.cfg = cfg
        self.signal = nn.Linear(cfg.d_model, cfg.hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> regulatory signal r: (B, T, hidden)."""
        return F.silu(self.signal(x))


def edge_gate_params(signal_width: int) -> int:
    """Parameters of one activates/represses edge: w (signal_width) and b."""
    return signal_width + 1


class EdgeGate(nn.Module):
    """Turns a regulatory signal (B, T, S) into a gate (B, T, 1) on the target region."""

    def __init__(self, signal_width: int, represses: bool):
        super().__init__()
        # A region of allosteric routers only sends no signal: its edges gate by a bias alone.
        self.proj = nn.Linear(signal_width, 1) if signal_width else None
        self.bias = None if signal_width else nn.Parameter(torch.zeros(1))
        self.represses = represses

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        if self.proj is not None:
            logit = self.proj(r)
        else:
            assert self.bias is not None  # one of the two exists (__init__)
            logit = self.bias.expand(*r.shape[:-1], 1)
        g = torch.sigmoid(logit)
        return 1 - g if self.represses else g


@dataclass(frozen=True)
class AllostericConfig(BlockConfig, kind="allosteric", role="regulatory"):
    """Allosteric regulation: sparse top-k communication between regions.

    Placed in a regulatory region, it reads the outputs of the coding regions before it
    (its `sources`; the residual stream itself when there are none) and regulates the
    coding regions after it (its `targets`, each with a learned receptor ρ_j):

        σ_{i,t} = x^{(i)}_t W_s                          summary of source i   (S)
        a_{ij,t} = σ_{i,t}·ρ_j / √S                      affinity of i for target j
        ω_{ij,t} = σ(a_{ij,t}) for j among i's top-k targets, 0 elsewhere
                   (the receptor's occupancy: binding strength, learnable for any k)
        m_{j,t} = Σ_i ω_{ij,t} σ_{i,t}                   message received by target j
        g_{j,t} = σ(m_{j,t}·u_j + b_j)                   gate on j's residual updates

    Causal (token t reads token t only) and cheap: O(sources·targets·S) per token.
    """

    k: int
    width: int
    sources: tuple[str, ...] = ()  # wired by `phenotype.config`, not genes
    targets: tuple[str, ...] = ()

    def build(self) -> AllostericRouter:
        return AllostericRouter(self)

    @property
    def n_sources(self) -> int:
        return max(1, len(self.sources))

    def num_params(self) -> int:
        s, j = self.width, len(self.targets)
        return self.d_model * s + j * s + j * (s + 1)

    def flops_per_token(self, seq_len: int) -> int:
        s, i, j = self.width, self.n_sources, len(self.targets)
        return 2 * i * self.d_model * s + (4 * i * j * s if j else 0)


class AllostericRouter(nn.Module):
    def __init__(self, cfg: AllostericConfig):
        super().__init__()
        self.cfg = cfg
        j, s = len(cfg.targets), cfg.width
        self.summary = nn.Linear(cfg.d_model, s, bias=False)
        self.receptors = nn.Parameter(torch.randn(j, s) / s**0.5)
        self.response = nn.Parameter(torch.randn(j, s) / s**0.5)
        self.response_bias = nn.Parameter(torch.zeros(j))

    def forward(self, sources: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """sources: outputs (B, T, D) of the source regions -> gate (B, T, 1) per target."""
        c = self.cfg
        if not c.targets:
            return {}
        summary = torch.stack([self.summary(x) for x in sources], -2)  # (B, T, I, S)
        # matmuls, not einsums: einsum turns size-1 contractions into uncounted products
        affinity = summary @ self.receptors.T / c.width**0.5  # (B, T, I, J)
        k = min(c.k, len(c.targets))
        top, idx = affinity.topk(k, -1)
        weight = torch.zeros_like(affinity).scatter(-1, idx, torch.sigmoid(top))
        message = weight.transpose(-1, -2) @ summary  # (B, T, J, S)
        gate = torch.sigmoid((message * self.response).sum(-1) + self.response_bias)
        return {t: gate[..., n, None] for n, t in enumerate(c.targets)}
