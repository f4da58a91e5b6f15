"""The four-path DNA compute block (DOGMA; gene kind `dna`, a T base).

Four causal sequence paths read the same input x_t (width D) and a regulation gate mixes
them per token:

    π_t = softmax(x_t W_π + b_π) ∈ Δ³,     y_t = Σ_{p ∈ A,B,C,D} π_{p,t} · y^p_t

Path A — strand displacement. R displacement reactions I_r + G_r → O_r + waste: the input
sets the input-strand concentration ι_t = softplus(x_t W_ι + b_ι) (R); gate complexes G_r are
consumed at mass-action rate k_r ι_{r,t} G_r and replenished towards 1 at rate γ_r; released
output strands O_r degrade at rate δ_r. Integrated exactly over one step (consumption, then
relaxation), with the displaced fraction q_t = 1 - e^{-k ι_t} and the depleted gate
fraction G'_t = 1 - G_t:

    G'_t = e^{-k ι_t - γ} G'_{t-1} + e^{-γ} q_t,        G'_0 = 0 (all gates loaded)
    O_t  = e^{-δ} O_{t-1} + (1 - G'_{t-1}) q_t,           y^A_t = O_t W_A

Concentrations stay in [0, 1] (G) and ≥ 0 (O); k, γ, δ = exp(learned logs). Both lines are
diagonal linear recurrences: training runs them through `kernels.gated_linear_recurrence`
(one 1 x 1 state per reaction); the species concentrations (G', O) are the carried state.

Strand-displacement cascade (`depth` Λ > 1): Λ layers of R reactions, where the output
strands released by layer ℓ-1 are the input strands of layer ℓ. Each upstream strand is
routed to the downstream gates by a column-stochastic matrix S^ℓ_{r,r'} = softmax_r(Θ^ℓ_{r,r'})
(R x R, Σ_r S^ℓ_{r,r'} = 1, so routing conserves the strands' total concentration):

    ι^1_t = softplus(x_t W_ι + b_ι),     ι^ℓ_t = S^ℓ O^{ℓ-1}_t   (ℓ = 2..Λ, same step t)

and layer ℓ runs the two lines above with its own k^ℓ, γ^ℓ, δ^ℓ on ι^ℓ; y^A_t = O^Λ_t W_A.
Every concentration stays non-negative and bounded: G'^ℓ ∈ [0, 1], q^ℓ ∈ [0, 1),
0 ≤ O^ℓ ≤ 1 / (1 - e^{-δ^ℓ}) (at most 1 is released per step), 0 ≤ Σ_r ι^ℓ_r = Σ_r O^{ℓ-1}_r.
Not conserved: a downstream gate reads its input strand's concentration without removing
it from O^{ℓ-1} (the strand is not consumed, as if in excess). That keeps each layer a
linear recurrence given the layer before it, so training stays parallel in time (Λ scans of
two lines); consuming it would couple the layers both ways and force a loop over tokens.
Λ = 1 is the independent reactions above, with the same parameters and numerics.

Path B — automaton. A selective scan over P channels and N named species (`species`):

    [u, δ, B, C] = x W_B,  Δ = softplus(δ + b_Δ),  A = -exp(A_log)  (S4D-real init)
    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t u_t,   y_t = C_t·h_t + D ⊙ u_t,   y^B = y W_Bo

through `kernels.selective_scan`; h (P x N) holds the species concentrations.

Path C — stochastic. L lanes, each a molecule hopping between S species. The input sets the
transition matrix M_t = softmax_columns(x_t W_M + b_M) (S x S, column-stochastic per lane).
In training each column's transition fires stochastically: a Gumbel-max sample, with the
straight-through gradient of the softmax (M̂ = onehot + M - sg(M)); in evaluation the
expectation M is used (independent steps: E[Π M̂] = Π E[M̂]). With p_0 = e_0,

    p_t = M_t p_{t-1} = (M_t ⋯ M_1) e_0,     y^C_t = vec(p_t) W_Co

training forms the prefix products by a parallel (doubling) scan, log₂T rounds of batched
S x S products (on CPU a loop of matrix-vector products, which is faster there); `step`
applies one matrix.

Path D — double strand. The input strand s_t = x_t W_s and a learned complement strand
c_t = x_t W_c hybridise over a short causal window w with per-offset binding strengths κ_j:

    h_t = s_t ⊙ Σ_{j=0}^{w-1} κ_j ⊙ c_{t-j},     y^D_t = (σ(x_t W_g) ⊙ h_t) W_Do

a gated bilinear pairing (the sum is a causal depthwise convolution of the complement).

State: path A 2RΛ, path B P·N, path C L·S, path D P·(w-1), fixed in the context length.
The scans' work is declared in `extra_flops_per_token` (recurrent-form cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, cast

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params, no_weight_decay

_NUCLEOTIDES = "ATCG"


def species_names(n: int) -> tuple[str, ...]:
    """Names of path B's state dimensions: A0, T0, C0, G0, A1, ..."""
    return tuple(f"{_NUCLEOTIDES[i % 4]}{i // 4}" for i in range(n))


@dataclass(frozen=True)
class DNAConfig(BlockConfig, kind="dna", role="sequence"):
    width: int  # P: channels of paths B and D
    reactions: int  # R: path A
    d_state: int  # N: path B species per channel
    species: int  # S: path C states per lane
    lanes: int  # L: path C
    window: int  # w: path D hybridisation window
    depth: int  # Λ: path A's cascade layers

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        """The gene leaves depth 1 out of its canonical params (genome ids from before the
        cascade hold): a gene without it has independent reactions."""
        return cls(d_model=structural["d_model"], bias=structural["bias"], **{"depth": 1, **params})

    def build(self) -> DNABlock:
        return DNABlock(self)

    def _linears(self) -> list[tuple[int, int, bool]]:
        d, p, r, n, s, lanes = (
            self.d_model,
            self.width,
            self.reactions,
            self.d_state,
            self.species,
            self.lanes,
        )
        b = self.bias
        return [
            (d, r, True),
            (r, d, b),  # A: input strands, read-out
            (d, 2 * p + 2 * n, b),
            (p, d, b),  # B
            (d, lanes * s * s, True),
            (lanes * s, d, b),  # C
            (d, 3 * p, b),
            (p, d, b),  # D
            (d, 4, True),
        ]  # regulation gate

    def num_params(self) -> int:
        p, r, n = self.width, self.reactions, self.d_state
        own = 3 * r + p + p * n + p + p * self.window  # k, γ, δ; b_Δ, A_log, D; κ
        cascade = (self.depth - 1) * (r * r + 3 * r)  # Θ^ℓ, k^ℓ, γ^ℓ, δ^ℓ of layers 2..Λ
        return own + cascade + sum(linear_params(i, o, b) for i, o, b in self._linears())

    def flops_per_token(self, seq_len: int) -> int:
        dense = 2 * sum(i * o for i, o, _ in self._linears()) + 2 * self.width * self.window
        routing = 2 * (self.depth - 1) * self.reactions**2  # ι^ℓ = S^ℓ O^{ℓ-1}
        return dense + routing + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        path_a = 10 * self.reactions * self.depth
        return path_a + 7 * self.width * self.d_state + 2 * self.lanes * self.species**2

    def state_fixed(self) -> int:
        return (
            2 * self.reactions * self.depth
            + self.width * self.d_state
            + self.lanes * self.species
            + self.width * (self.window - 1)
        )


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batched product of small matrices as a broadcast sum (the scan's declared work)."""
    return (a[..., :, :, None] * b[..., None, :, :]).sum(-2)


def prefix_products(m: torch.Tensor) -> torch.Tensor:
    """m: (B, T, ..., S, S) -> P_t = m_t m_{t-1} ⋯ m_1 by log₂T doubling rounds."""
    T = m.shape[1]
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device).expand_as(m[:, :1])
    offset = 1
    while offset < T:
        earlier = torch.cat([eye.expand(-1, offset, *m.shape[2:]), m[:, :-offset]], 1)
        m = _matmul(m, earlier)
        offset *= 2
    return m


def lane_distributions(m: torch.Tensor) -> torch.Tensor:
    """m: (B, T, L, S, S) -> p_t = M_t ⋯ M_1 e_0, (B, T, L, S).

    On CPU a loop of T matrix-vector products (T·S² work per lane; about 6x faster than the
    doubling at T = 64, S = 4), run by :class:`_LaneScan` outside autograd; elsewhere, and
    wherever plain ops are needed (``torch.export``, ``torch.compile``, the export's reference
    check: `kernels._dispatch.plain_ops_only`), the first column of :func:`prefix_products`
    (log₂T parallel rounds, T·log₂T·S³ work). Equal up to float rounding.
    """
    from dogma_evolve.kernels._dispatch import plain_ops_only

    if m.device.type != "cpu" or plain_ops_only():  # traced (torch.export): plain ops
        return prefix_products(m)[..., 0]
    return _LaneScan.apply(m)


class _LaneScan(torch.autograd.Function):
    """The CPU loop p_t = M_t p_{t-1} (p_0 = e_0) with its adjoint written out: the loop runs
    outside autograd (two ops a step, into preallocated time-major buffers), and the backward
    is the reverse loop a_{t-1} = g_{t-1} + M_t^T a_t, then ∂M_t = a_t p_{t-1}^T in one
    product. Elementwise products and sums only (the FLOP counter keeps out of the scan, whose
    work is declared), the forward's float operations those of a plain autograd loop."""

    @staticmethod
    def forward(ctx: Any, m: torch.Tensor) -> torch.Tensor:
        ms = m.movedim(1, 0).contiguous()  # (T, B, L, S, S)
        out = ms.new_empty(ms.shape[:-1])  # (T, B, L, S)
        p = torch.zeros_like(out[0])[..., None, :]
        p[..., 0] = 1
        product = torch.empty_like(ms[0])
        outs = out.unbind(0)
        for m_t, out_t in zip(ms.unbind(0), outs, strict=True):
            torch.sum(torch.mul(m_t, p, out=product), -1, out=out_t)
            p = out_t[..., None, :]
        ctx.save_for_backward(ms, out)
        return out.movedim(0, 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        ms, out = ctx.saved_tensors
        # (T, B, L, S), becomes the adjoint a_t in place: always a copy, never the caller's
        # gradient (a time-major one, e.g. `randn_like` of the output, would be `contiguous()`)
        g = grad.movedim(1, 0).clone(memory_format=torch.contiguous_format)
        product = torch.empty_like(ms[0])
        gs, m_s = g.unbind(0), ms.unbind(0)
        for t in range(len(gs) - 1, 0, -1):
            torch.mul(m_s[t], gs[t][..., :, None], out=product)
            gs[t - 1].add_(product.sum(-2))
        earlier = torch.cat([torch.zeros_like(out[:1]), out[:-1]], 0)
        earlier[0, ..., 0] = 1  # p_0 = e_0
        return (g[..., :, None] * earlier[..., None, :]).movedim(0, 1)


class DNABlock(Mixer[DNAConfig]):
    def __init__(self, cfg: DNAConfig):
        super().__init__()
        self.cfg = cfg
        d, p, r, n, s, lanes = (cfg.d_model, cfg.width, cfg.reactions, cfg.d_state, cfg.species, cfg.lanes)
        # Path A: strand displacement.
        self.input_strands = nn.Linear(d, r)
        self.k_log = nn.Parameter(torch.zeros(r))
        self.gamma_log = nn.Parameter(torch.full((r,), math.log(0.1)))
        self.delta_log = nn.Parameter(torch.linspace(math.log(0.01), math.log(0.5), r))
        self.out_A = nn.Linear(r, d, bias=cfg.bias)
        if cfg.depth > 1:  # cascade layers 2..Λ (deterministic init: no draw moves the others')
            layers = cfg.depth - 1
            self.routing = nn.Parameter(4.0 * torch.eye(r).repeat(layers, 1, 1))  # Θ: mostly r -> r
            self.cascade_k_log = nn.Parameter(torch.zeros(layers, r))
            self.cascade_gamma_log = nn.Parameter(torch.full((layers, r), math.log(0.1)))
            self.cascade_delta_log = nn.Parameter(
                torch.linspace(math.log(0.01), math.log(0.5), r).repeat(layers, 1)
            )
            no_weight_decay(self.cascade_k_log, self.cascade_gamma_log, self.cascade_delta_log)
        # Path B: automaton (selective scan over named species).
        self.in_B = nn.Linear(d, 2 * p + 2 * n, bias=cfg.bias)
        dt = torch.exp(torch.rand(p) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(p, 1))
        self.D = nn.Parameter(torch.ones(p))
        self.out_B = nn.Linear(p, d, bias=cfg.bias)
        # Path C: stochastic transitions.
        self.transitions = nn.Linear(d, lanes * s * s)
        self.out_C = nn.Linear(lanes * s, d, bias=cfg.bias)
        # Path D: double strand.
        self.in_D = nn.Linear(d, 3 * p, bias=cfg.bias)
        self.binding = nn.Parameter(torch.randn(p, 1, cfg.window) / math.sqrt(cfg.window))
        self.out_D = nn.Linear(p, d, bias=cfg.bias)
        # Regulation gate.
        self.regulation = nn.Linear(d, 4)
        no_weight_decay(self.k_log, self.gamma_log, self.delta_log, self.dt_bias, self.A_log, self.D)

    @property
    def species(self) -> tuple[str, ...]:
        return species_names(self.cfg.d_state)

    # -- path A ----------------------------------------------------------------------------
    def _rates(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-rates (k, γ, δ) of cascade layer `layer` (0: the first), each (R,)."""
        if layer == 0:
            return self.k_log, self.gamma_log, self.delta_log
        i = layer - 1
        return self.cascade_k_log[i], self.cascade_gamma_log[i], self.cascade_delta_log[i]

    def _input_strands(self, x: torch.Tensor, layer: int, upstream: torch.Tensor | None) -> torch.Tensor:
        """ι of layer `layer`, (..., R): from the input x (..., D) for the first, else the
        upstream layer's released strands O^{ℓ-1} (..., R) routed by S^ℓ."""
        if layer == 0 or upstream is None:
            return F.softplus(self.input_strands(x))
        routing = torch.softmax(self.routing[layer - 1], dim=0)  # column r' sums to 1 over r
        return F.linear(upstream, routing)

    def _displacement(self, iota: torch.Tensor, layer: int) -> tuple[torch.Tensor, ...]:
        """ι (..., R) -> log-decays and inputs of G' and the displaced fraction q (..., R)."""
        k_log, gamma_log, _ = self._rates(layer)
        k_iota = torch.exp(k_log) * iota
        gamma = torch.exp(gamma_log)
        return -k_iota - gamma, torch.exp(-gamma) * -torch.expm1(-k_iota), -torch.expm1(-k_iota)

    def strand_cascade(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> the released output strands O^ℓ_t of every layer, (B, T, Λ, R)."""
        import dogma_evolve.kernels as kernels

        def diagonal_scan(log_decay: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
            batch, length, reactions = inputs.shape
            ones = inputs.new_ones(batch, reactions, length, 1)
            out, _ = kernels.gated_linear_recurrence(
                ones, ones, inputs.transpose(1, 2)[..., None], log_decay.transpose(1, 2)
            )
            return out[..., 0].transpose(1, 2)

        released: torch.Tensor | None = None
        layers = []
        for layer in range(self.cfg.depth):
            log_g, in_g, q = self._displacement(self._input_strands(x, layer, released), layer)
            depleted = diagonal_scan(log_g, in_g)
            previous = torch.cat([torch.zeros_like(depleted[:, :1]), depleted[:, :-1]], 1)
            log_o = (-torch.exp(self._rates(layer)[2])).expand_as(q)
            released = diagonal_scan(log_o, (1 - previous) * q)
            layers.append(released)
        return torch.stack(layers, 2)

    def _path_A(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_A(self.strand_cascade(x)[:, :, -1])

    # -- path B ----------------------------------------------------------------------------
    def _automaton_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p, n = self.cfg.width, self.cfg.d_state
        return self.in_B(x).split([p, p, n, n], -1)

    def _path_B(self, x: torch.Tensor) -> torch.Tensor:
        from dogma_evolve.kernels import selective_scan

        u, delta, Bm, Cm = (z.transpose(1, 2) for z in self._automaton_inputs(x))
        y = selective_scan(
            u, delta, -torch.exp(self.A_log), Bm, Cm, self.D, delta_bias=self.dt_bias, delta_softplus=True
        )
        return self.out_B(cast(torch.Tensor, y).transpose(1, 2))  # no last state asked: one tensor

    # -- path C ----------------------------------------------------------------------------
    def _transition(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., D) -> M: (..., L, S_to, S_from), sampled in training."""
        s = self.cfg.species
        logits = self.transitions(x).unflatten(-1, (self.cfg.lanes, s, s))
        m = torch.softmax(logits, dim=-2)
        if not self.training:
            return m
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-20)))
        # max's indices are argmax's (the first maximum), without argmax's slow CPU path on
        # a dimension that is not the last one.
        fired = F.one_hot((logits + gumbel).max(-2).indices, s).transpose(-1, -2).to(m.dtype)
        return fired + m - m.detach()

    def _path_C(self, x: torch.Tensor) -> torch.Tensor:
        p = lane_distributions(self._transition(x))  # (B, T, L, S) = P_t e_0
        return self.out_C(p.flatten(-2))

    # -- path D ----------------------------------------------------------------------------
    def _path_D(self, x: torch.Tensor) -> torch.Tensor:
        strand, complement, gate = self.in_D(x).chunk(3, -1)
        paired = F.conv1d(
            F.pad(complement.transpose(1, 2), (self.cfg.window - 1, 0)), self.binding, groups=self.cfg.width
        ).transpose(1, 2)
        return self.out_D(torch.sigmoid(gate) * strand * paired)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        paths = torch.stack([self._path_A(x), self._path_B(x), self._path_C(x), self._path_D(x)], -1)
        return (paths * torch.softmax(self.regulation(x), -1)[..., None, :]).sum(-1)

    # -- recurrent form --------------------------------------------------------------------
    def init_state(self, batch: int) -> dict[str, torch.Tensor]:
        c, w = self.cfg, self.D
        p0 = w.new_zeros(batch, c.lanes, c.species)
        p0[..., 0] = 1
        return {
            "depleted": w.new_zeros(batch, c.depth, c.reactions),
            "released": w.new_zeros(batch, c.depth, c.reactions),
            "species": w.new_zeros(batch, c.width, c.d_state),
            "lanes": p0,
            "complement": w.new_zeros(batch, c.width, c.window - 1),
        }

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D): one step of each path's recurrence."""
        upstream: torch.Tensor | None = None
        depleted_layers, released_layers = [], []
        for layer in range(self.cfg.depth):
            log_g, in_g, q = self._displacement(self._input_strands(x_t, layer, upstream), layer)
            was_depleted, was_released = state["depleted"][:, layer], state["released"][:, layer]
            decay = torch.exp(-torch.exp(self._rates(layer)[2]))
            upstream = decay * was_released + (1 - was_depleted) * q
            depleted_layers.append(torch.exp(log_g) * was_depleted + in_g)
            released_layers.append(upstream)
        assert upstream is not None

        u, delta, Bm, Cm = self._automaton_inputs(x_t)
        delta = F.softplus(delta + self.dt_bias)[..., None]
        h = torch.exp(delta * -torch.exp(self.A_log)) * state["species"] + delta * Bm[:, None] * u[..., None]
        y_B = (h * Cm[:, None]).sum(-1) + self.D * u

        lanes = (self._transition(x_t) * state["lanes"][..., None, :]).sum(-1)

        strand, complement, gate = self.in_D(x_t).chunk(3, -1)
        window = torch.cat([state["complement"], complement[..., None]], -1)
        paired = (window * self.binding[:, 0]).sum(-1)

        paths = torch.stack(
            [
                self.out_A(upstream),
                self.out_B(y_B),
                self.out_C(lanes.flatten(-2)),
                self.out_D(torch.sigmoid(gate) * strand * paired),
            ],
            -1,
        )
        y = (paths * torch.softmax(self.regulation(x_t), -1)[..., None, :]).sum(-1)
        return y, {
            "depleted": torch.stack(depleted_layers, 1),
            "released": torch.stack(released_layers, 1),
            "species": h,
            "lanes": lanes,
            "complement": window[..., 1:],
        }

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
