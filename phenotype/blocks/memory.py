"""DOGMA memories: epigenetic memory (carried across blocks and chunks) and the fixed-reach
TetraMemory (gene kind `tetra_reach`; the chapter's volumetric one, `tetra`, is
`blocks.tetra_mesh`).

Epigenetic memory — M "marks" per token, read and written through gates:

    r_t = σ(x_t W_r + b_r),  w_t = σ(x_t W_w + b_w),  c_t = tanh(x_t W_c)      (M each)
    m_t = λ ⊙ m_{t-1} + (1 - λ) ⊙ (w_t ⊙ c_t)            λ = σ(θ): marks persist in time
    e_t = (1 - w_t) ⊙ e^in_t + m_t                        marks handed to the next block
    y_t = (r_t ⊙ e_t) W_o

e^in_t are the marks the previous epigenetic block (same width M) left at token t (0 for the
first): they travel from block to block in the stack's carry (`blocks.base.Carry`, one key
per width), and m carries them across chunks of a sequence (the `step` state, M elements).
The temporal carry is a diagonal linear recurrence (`kernels.gated_linear_recurrence`, one
1 x 1 state per mark).

Fixed-reach TetraMemory — token t is bonded to itself, to its local window t-1..t-w and to
strided "face" neighbours t-b^1, ..., t-b^ℓ (stride b, ℓ levels), K = |offsets| neighbours,
all in the past. R rounds of message passing, weights
shared across rounds, with a learned bond strength β_{r,o} per round and offset:

    α_{t,o} = softmax_o(q_t·k_{t-o} / √D + β_{r,o})       (offsets with t - o < 0 masked)
    h^r_t = h^{r-1}_t + (Σ_o α_{t,o} v_{t-o}) W_o,      [q, k, v] = h^{r-1} [W_q, W_k, W_v]
    y_t = h^R_t - x_t        (h^0 = x; the residual layer adds x back)

O(T·K·D) per round instead of attention's O(T²·D). Its reach is fixed: the output at t hears
t - s only for s ≤ R·max(offsets), whatever the context. Inference keeps, per round, the last
max(offsets) inputs of that round: R·max(offsets)·D state elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Carry, Mixer, linear_params, no_weight_decay
from dogma_evolve.phenotype.blocks.tetra_mesh import neighbour_attention


@dataclass(frozen=True)
class EpigeneticConfig(BlockConfig, kind="epigenetic", role="sequence"):
    slots: int  # M marks

    def build(self) -> EpigeneticMemory:
        return EpigeneticMemory(self)

    def num_params(self) -> int:
        d, m = self.d_model, self.slots
        return 3 * d * m + 3 * m + linear_params(m, d, self.bias)

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * 4 * self.d_model * self.slots + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return 5 * self.slots

    def state_fixed(self) -> int:
        return self.slots


class EpigeneticMemory(Mixer[EpigeneticConfig]):
    """Hands its marks e to the next epigenetic block of the same width through the carry
    (key `carry_key`); alone (plain `forward` / `step`) it inherits none."""

    def __init__(self, cfg: EpigeneticConfig):
        super().__init__()
        self.cfg = cfg
        d, m = cfg.d_model, cfg.slots
        self.gates = nn.Linear(d, 2 * m)  # read and write gates
        self.candidate = nn.Linear(d, m, bias=False)
        self.persistence = nn.Parameter(torch.linspace(0.0, 4.0, m))  # θ: λ = σ(θ)
        self.out_proj = nn.Linear(m, d, bias=cfg.bias)
        no_weight_decay(self.persistence)

    @property
    def carry_key(self) -> str:
        return f"epigenetic_marks/{self.cfg.slots}"

    def _gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        read, write = torch.sigmoid(self.gates(x)).chunk(2, -1)
        return read, write, write * torch.tanh(self.candidate(x))

    def _forward_marks(
        self, x: torch.Tensor, marks: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, D), inherited marks (B, T, M) or None -> (y (B, T, D), marks (B, T, M))."""
        import dogma_evolve.kernels as kernels

        read, write, written = self._gates(x)
        persistence = F.logsigmoid(self.persistence)
        B, T, M = written.shape
        ones = written.new_ones(B, M, T, 1)
        m, _ = kernels.gated_linear_recurrence(
            ones,
            ones,
            ((1 - torch.exp(persistence)) * written).transpose(1, 2)[..., None],
            persistence[None, :, None].expand(B, M, T),
        )
        marks_out = m[..., 0].transpose(1, 2)
        if marks is not None:
            marks_out = marks_out + (1 - write) * marks
        return self.out_proj(read * marks_out), marks_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D) (no inherited marks)."""
        return self._forward_marks(x, None)[0]

    def forward_carried(self, x: torch.Tensor, carry: Carry) -> torch.Tensor:
        y, carry[self.carry_key] = self._forward_marks(x, carry.get(self.carry_key))
        return y

    def init_state(self, batch: int) -> torch.Tensor:
        return self.persistence.new_zeros(batch, self.cfg.slots)

    def _step_marks(
        self, x_t: torch.Tensor, state: torch.Tensor, marks: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x_t: (B, D), state m_{t-1} (B, M), inherited marks (B, M) or None
        -> (y_t (B, D), m_t, marks handed on (B, M))."""
        read, write, written = self._gates(x_t)
        lam = torch.sigmoid(self.persistence)
        m = lam * state + (1 - lam) * written
        marks_out = m if marks is None else m + (1 - write) * marks
        return self.out_proj(read * marks_out), m, marks_out

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, state, _ = self._step_marks(x_t, state, None)
        return y, state

    def step_carried(
        self, x_t: torch.Tensor, state: torch.Tensor, carry: Carry
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, state, carry[self.carry_key] = self._step_marks(x_t, state, carry.get(self.carry_key))
        return y, state

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()


@dataclass(frozen=True)
class TetraReachConfig(BlockConfig, kind="tetra_reach", role="sequence"):
    window: int  # local neighbours t-1..t-w
    stride: int  # face neighbours t - stride^j
    levels: int  # j = 1..levels
    rounds: int  # message-passing rounds (shared weights)

    def build(self) -> TetraReach:
        return TetraReach(self)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Bond offsets, self (0) first."""
        local = range(self.window + 1)
        faces = (self.stride**j for j in range(1, self.levels + 1))
        return tuple(sorted(set(local) | set(faces)))

    def num_params(self) -> int:
        return 4 * linear_params(self.d_model, self.d_model, self.bias) + self.rounds * len(self.offsets)

    def flops_per_token(self, seq_len: int) -> int:
        d, k = self.d_model, len(self.offsets)
        return self.rounds * (2 * 4 * d * d + 2 * 2 * k * d)

    def state_fixed(self) -> int:
        return self.rounds * max(self.offsets) * self.d_model


class TetraReach(Mixer[TetraReachConfig]):
    offset: torch.Tensor  # the bond offsets (K,), a buffer

    def __init__(self, cfg: TetraReachConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.q_proj = nn.Linear(d, d, bias=cfg.bias)
        self.k_proj = nn.Linear(d, d, bias=cfg.bias)
        self.v_proj = nn.Linear(d, d, bias=cfg.bias)
        self.o_proj = nn.Linear(d, d, bias=cfg.bias)
        self.bond = nn.Parameter(torch.zeros(cfg.rounds, len(cfg.offsets)))
        no_weight_decay(self.bond)
        self.register_buffer("offset", torch.tensor(cfg.offsets), persistent=False)

    def _round(self, r: int, h: torch.Tensor, history: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """h: (B, T, D) this round's input; history: (B, H + T, D) the same sequence with H
        earlier inputs in front; valid: (T, K) bonds that reach a real token."""
        T, H = h.shape[1], history.shape[1] - h.shape[1]
        k, v = self.k_proj(history), self.v_proj(history)
        index = H + torch.arange(T, device=h.device)[:, None] - self.offset[None, :]  # (T, K)
        index = index.clamp(min=0)
        k_n, v_n = k[:, index], v[:, index]  # (B, T, K, D)
        q = self.q_proj(h)[..., None, :]  # (B, T, 1, D)
        scores = (q @ k_n.transpose(-1, -2))[..., 0, :] / math.sqrt(h.shape[-1])
        scores = (scores + self.bond[r]).masked_fill(~valid, float("-inf"))
        message = (torch.softmax(scores, -1)[..., None, :] @ v_n)[..., 0, :]
        return h + self.o_proj(message)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D).

        :meth:`_round`'s arithmetic with fewer ops: the three input projections as one
        product (their weights concatenated once), the neighbours' keys and values gathered by
        one index, every round's bond biases and mask one tensor built once, and the
        attention's backward written out (`tetra_mesh.neighbour_attention`)."""
        B, T, D = x.shape
        t = torch.arange(T, device=x.device)[:, None]
        index = (t - self.offset[None, :]).clamp(min=0).flatten()  # (T·K,)
        bias = torch.where(t >= self.offset[None, :], self.bond[:, None, :], float("-inf"))[:, :, None]
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projections])
        joint_bias = torch.cat([p.bias for p in projections]) if self.cfg.bias else None
        h = x
        for r in range(self.cfg.rounds):
            q, kv = F.linear(h, weight, joint_bias).split([D, 2 * D], -1)
            k, v = kv.index_select(1, index).unflatten(1, (T, -1)).split(D, -1)  # (B, T, K, D)
            h = h + self.o_proj(neighbour_attention(q[..., None, :], k, v, bias[r])[..., 0, :])
        return h - x

    def init_state(self, batch: int) -> dict[str, Any]:
        c = self.cfg
        return {"history": self.bond.new_zeros(c.rounds, batch, max(c.offsets), c.d_model), "pos": 0}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D); history[r] holds round r's last max(offsets) inputs."""
        pos, keep = state["pos"], max(self.cfg.offsets)
        valid = (pos >= self.offset)[None, :]
        h, histories = x_t[:, None], []
        for r in range(self.cfg.rounds):
            history = torch.cat([state["history"][r], h], 1)
            histories.append(history[:, -keep:])
            h = self._round(r, h, history, valid)
        return (h - x_t[:, None])[:, 0], {"history": torch.stack(histories), "pos": pos + 1}

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
