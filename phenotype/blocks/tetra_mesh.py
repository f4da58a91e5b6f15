"""Volumetric TetraMemory (gene kind `tetra`, format 1's `tetra_mesh`): tokens on a causal
3-D tetrahedral mesh, the DOGMA chapter's TetraMemory (§15.6).

**Embedding.** Position t is the lattice site (x, y, z) = (t mod L, ⌊t/L⌋ mod L, ⌊t/L²⌋) of
a cube of side L = ⌈max_len^{1/3}⌉ (positions fill it in causal, raster order, x fastest),
with helical boundaries: stepping -1 in x from x = 0 lands on the end of the previous row,
so a lattice vector v = (a, b, c) is the same index offset o(v) = a + bL + cL² everywhere.
The mesh is the Freudenthal (Kuhn) triangulation of the cubic lattice, the tetrahedral
honeycomb that splits every unit cube into 6 tetrahedra around its main diagonal: each site
has 14 bonds, ±e₁, ±e₂, ±e₃, ±(e₁+e₂), ±(e₂+e₃), ±(e₁+e₃), ±(e₁+e₂+e₃). The 7 negative ones
reach earlier sites (they are the other 7 corners of the unit cube below the site), and
only those are used, so the mesh is causal. A site keeps k = `neighbours` ∈ [4, 8] bonds:
itself and the first k-1 of e₁, e₂, e₃, e₁+e₂+e₃, e₁+e₂, e₂+e₃, e₁+e₃ (k = 8: the whole
causal cube, all 6 tetrahedra; k = 4: the axis bonds of one corner tetrahedron).

**Multi-scale.** Scale ℓ = 0..S-1 is the same mesh at spacing 2^ℓ: its site at t holds the
mean of the 2^ℓ x 2^ℓ x 2^ℓ cube of fine sites whose top corner is t (sites before the
sequence count as 0), built hierarchically, H^ℓ_t = 1/8 Σ_{u ∈ {0,1}³} H^{ℓ-1}_{t - 2^{ℓ-1}o(u)},
and it is bonded along 2^ℓ·v. Bond j = (ℓ, v) of site t reads H^ℓ_{t - 2^ℓ o(v)}.

**Propagation.** With q = x W_q, h⁰ = x W_v, λ = σ(θ) ∈ (0, 1)^D per channel, β_ℓ a learned
bias per scale, for r = 1..R (weights shared across rounds):

    n_{t,j} = H^ℓ(h^{r-1})_{t - 2^ℓ o(v)}                 (K = k·S bonds, 0 before the sequence)
    α_{t,j} = softmax_j(q_t · n_{t,j} / √D + β_ℓ)          (bonds before the sequence masked)
    h^r_t = h^{r-1}_t + λ ⊙ (Σ_j α_{t,j} n_{t,j} - h^{r-1}_t)
    y_t = h^R_t W_o

Each round is a convex combination, so |h^r| stays within the values' range however many
rounds run. Cost O(T·K·D) per round; R = ⌈reach·max_len^{1/3}⌉, or with reach = 0 the
least R that covers the prefix, f_k (⌊(L-1)/2^{S-1}⌋ + S - 1) with f = 3, 2, 2, 2, 1 for
k = 4..8: a displacement t - s has lattice coordinates < L, each written as a multiple of
2^{S-1} plus one binary digit per finer scale, and k bonds walk a displacement (a, b, c) in
a + b + c (k = 4), 2·max(a, b, c) (k = 5..7) or max(a, b, c) (k = 8) steps. So after the
R rounds every output has heard from its whole prefix (up to max_len tokens), in
O(T^{1/3}) rounds, O(T^{4/3}·k·d) in all, as the chapter's §15.6.6 says.

**Recurrent form.** R and L are fixed by max_len when the genome decodes, so `step` runs
the same R rounds as `forward` and equals it exactly. Per round and scale ℓ it keeps the
last 2^ℓ(1 + L + L²) pooled sites: R·D·(2^S - 1)(1 + L + L²) state elements, fixed in the
context length (about the size of a KV cache of max_len tokens: O(T^{2/3}) per round).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params, no_weight_decay

# Backward bond vectors in the order sites keep them (after the site itself).
BONDS = ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1), (1, 1, 0), (0, 1, 1), (1, 0, 1))
CORNERS = tuple((a, b, c) for c in (0, 1) for b in (0, 1) for a in (0, 1))
_STEP_FACTOR = {4: 3, 5: 2, 6: 2, 7: 2, 8: 1}  # as genome.kinds.tetra.STEP_FACTOR


def mesh_side(max_len: int) -> int:
    """L = ⌈max_len^{1/3}⌉ (as dogma_evolve.genome.kinds.tetra.mesh_side)."""
    side = max(1, round(max_len ** (1 / 3)))
    while side**3 < max_len:
        side += 1
    while side > 1 and (side - 1) ** 3 >= max_len:
        side -= 1
    return side


def mesh_rounds(neighbours: int, scales: int, reach: float, max_len: int) -> int:
    """Propagation rounds (as dogma_evolve.genome.kinds.tetra.propagation_rounds)."""
    if reach == 0:
        side = mesh_side(max_len)
        return max(1, _STEP_FACTOR[neighbours] * ((side - 1) // 2 ** (scales - 1) + scales - 1))
    return max(1, math.ceil(reach * max_len ** (1 / 3) - 1e-9))


def lattice_offset(vector: tuple[int, int, int], side: int) -> int:
    """o(v) = a + bL + cL²: the index offset of lattice vector v under helical boundaries."""
    a, b, c = vector
    return a + b * side + c * side * side


@dataclass(frozen=True)
class TetraMeshConfig(BlockConfig, kind="tetra", role="sequence"):
    neighbours: int  # k bonds per site, itself included
    scales: int  # S mesh scales (spacing 1, 2, ..., 2^{S-1})
    reach: float  # c: rounds = ⌈c·max_len^{1/3}⌉, 0 = just enough to cover the prefix
    side: int  # L, from max_len (no param)
    rounds: int  # R, from max_len (no param)

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        """The lattice side and the rounds follow the structural max_len."""
        n = structural["max_len"]
        return cls(
            d_model=structural["d_model"],
            bias=structural["bias"],
            side=mesh_side(n),
            rounds=mesh_rounds(params["neighbours"], params["scales"], params["reach"], n),
            **params,
        )

    def build(self) -> TetraMesh:
        return TetraMesh(self)

    @property
    def bonds(self) -> tuple[tuple[int, int], ...]:
        """(scale ℓ, index offset 2^ℓ·o(v)) of every bond, scale by scale, self first."""
        vectors = ((0, 0, 0), *BONDS[: self.neighbours - 1])
        return tuple(
            (scale, 2**scale * lattice_offset(v, self.side)) for scale in range(self.scales) for v in vectors
        )

    @property
    def history(self) -> tuple[int, ...]:
        """Pooled sites kept per round at each scale: 2^ℓ(1 + L + L²)."""
        cube = lattice_offset((1, 1, 1), self.side)
        return tuple(2**scale * cube for scale in range(self.scales))

    def num_params(self) -> int:
        return 3 * linear_params(self.d_model, self.d_model, self.bias) + self.scales + self.d_model

    def flops_per_token(self, seq_len: int) -> int:
        """q, v and output projections, then per round the bond scores and the message."""
        d, k = self.d_model, len(self.bonds)
        return 3 * 2 * d * d + self.rounds * 2 * 2 * k * d + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        """Per round: 8 adds and a scaling per pooled site of each coarser scale, and the
        convex update (a subtraction, a product, an addition) per channel."""
        return self.rounds * self.d_model * (9 * (self.scales - 1) + 3)

    def state_fixed(self) -> int:
        return self.rounds * self.d_model * sum(self.history)


def delays(seq: torch.Tensor, offsets: list[int]) -> list[torch.Tensor]:
    """seq: (B, T, D) -> for each offset o, the sequence o tokens later, zeros before its
    start (views into one zero-padded copy)."""
    pad = min(max(offsets), seq.shape[1])
    padded = torch.cat([seq.new_zeros(seq.shape[0], pad, seq.shape[2]), seq], 1) if pad else seq
    T = seq.shape[1]
    return [padded[:, pad - o : pad - o + T] if o < T else seq.new_zeros(seq.shape) for o in offsets]


def corner_mean(corners: list[torch.Tensor]) -> torch.Tensor:
    """The mean of a cube's 8 corner values (one summation order for both forms)."""
    return torch.stack(corners).sum(0) / len(corners)


class _NeighbourAttention(torch.autograd.Function):
    """softmax(q kᵀ/√D + bias) v over each site's K neighbours, with its backward written
    out: autograd's backward of the two batched products forms each site's K x D outer
    products as rank-1 matrix products (and one of them transposed), several times the
    forward's time on CPU; here they are broadcast products, in the neighbours' layout. The
    forward is the plain expression (its two batched products are what a FLOP counter sees);
    the backward computes in the gradient's precision with the softmax's (float32 at least)."""

    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
        weights = torch.softmax(scores, -1)
        ctx.save_for_backward(q, k, v, weights)
        ctx.bias_shape, ctx.shared = bias.shape, k is v
        return weights @ v

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, weights = ctx.saved_tensors
        dtype = torch.promote_types(grad.dtype, weights.dtype)
        q, k, v, weights, grad = (z.to(dtype) for z in (q, k, v, weights, grad))
        d_weights = grad @ v.transpose(-1, -2)  # (..., 1, K)
        d_scores = weights * (d_weights - (weights * d_weights).sum(-1, keepdim=True))
        d_bias = d_scores.sum_to_size(ctx.bias_shape)
        d_scores = d_scores / math.sqrt(q.shape[-1])
        d_v = weights.transpose(-1, -2) * grad  # (..., K, 1) x (..., 1, D)
        if ctx.shared:  # one tensor's two uses: one gradient, accumulated here
            return d_scores @ k, d_v.addcmul_(d_scores.transpose(-1, -2), q), None, d_bias
        return d_scores @ k, d_scores.transpose(-1, -2) * q, d_v, d_bias


def neighbour_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """q: (..., 1, D), k, v: (..., K, D), bias broadcastable to (..., 1, K) (-inf: a masked
    bond; every site keeps one) -> softmax(q kᵀ/√D + bias) v: (..., 1, D)."""
    from dogma_evolve.kernels._dispatch import plain_ops_only

    if plain_ops_only():  # traced (torch.export, torch.compile): autograd's own backward
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
        return torch.softmax(scores, -1) @ v
    return _NeighbourAttention.apply(q, k, v, bias)


class TetraMesh(Mixer[TetraMeshConfig]):
    bond_offset: torch.Tensor  # (K,) index offsets of the bonds, a buffer

    def __init__(self, cfg: TetraMeshConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.q_proj = nn.Linear(d, d, bias=cfg.bias)
        self.v_proj = nn.Linear(d, d, bias=cfg.bias)
        self.o_proj = nn.Linear(d, d, bias=cfg.bias)
        self.scale_bias = nn.Parameter(torch.zeros(cfg.scales))  # β_ℓ
        self.mixing = nn.Parameter(torch.zeros(d))  # θ: λ = σ(θ), 1/2 at start
        no_weight_decay(self.scale_bias, self.mixing)
        self.register_buffer(
            "bond_offset", torch.tensor([o for _, o in cfg.bonds], dtype=torch.long), persistent=False
        )

    def _pooled(self, h: torch.Tensor) -> list[torch.Tensor]:
        """h: (B, T, D) -> [H^0 = h, H^1, ..., H^{S-1}], each (B, T, D)."""
        side, levels = self.cfg.side, [h]
        for scale in range(1, self.cfg.scales):
            offsets = [2 ** (scale - 1) * lattice_offset(u, side) for u in CORNERS]
            levels.append(corner_mean(delays(levels[-1], offsets)))
        return levels

    def _message(self, q: torch.Tensor, n: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """q: (B, T, D), n: (B, T, K, D), valid: (T, K) -> Σ_j α_j n_j: (B, T, D)."""
        scores = (q[..., None, :] @ n.transpose(-1, -2))[..., 0, :] / math.sqrt(q.shape[-1])
        bias = self.scale_bias.repeat_interleave(len(self.cfg.bonds) // self.cfg.scales)
        scores = (scores + bias).masked_fill(~valid, float("-inf"))
        return (torch.softmax(scores, -1)[..., None, :] @ n)[..., 0, :]

    def _gather_index(
        self, T: int, pad: int, device: torch.device
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Where `forward` reads each site, in the scales' zero-padded sequences laid end to end
        (scale ℓ's site t at ℓ(pad + T) + pad + t; a site before the sequence at its scale's
        first pad row, a zero): the 8 corners each coarser scale pools, (T·8,) in its finer
        scale's sequence, and every bond's neighbour, (T·K,) in all the scales'."""
        c, t = self.cfg, torch.arange(T, device=device)[:, None]
        corners = torch.tensor([lattice_offset(u, c.side) for u in CORNERS], device=device)
        pooled = [
            (pad + t - 2 ** (scale - 1) * corners).clamp(min=0).flatten() for scale in range(1, c.scales)
        ]
        scale = torch.tensor([ell for ell, _ in c.bonds], device=device)
        bonds = scale * (pad + T) + (pad + t - self.bond_offset).clamp(min=0)
        return pooled, bonds.flatten()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D).

        Each round gathers its neighbours with one index (and each coarser scale its 8 pooled
        corners with one), the sites kept with a singleton query axis throughout; the scores'
        bias and mask are one (T, K) tensor built once. The float operations are those of
        :meth:`step`'s round up to their order (the sums of the gathers' gradients)."""
        B, T, D = x.shape
        valid = torch.arange(T, device=x.device)[:, None] >= self.bond_offset[None, :]
        bias = self.scale_bias.repeat_interleave(len(self.cfg.bonds) // self.cfg.scales)
        bias = torch.where(valid, bias, float("-inf"))[:, None, :]  # (T, 1, K)
        pad = max(1, min(max(o for _, o in self.cfg.bonds), T))  # the pad rows hold every site before 0
        pooled_at, bonds_at = self._gather_index(T, pad, x.device)
        zeros = x.new_zeros(B, pad, D)
        q, h = self.q_proj(x)[..., None, :], self.v_proj(x)  # (B, T, 1, D), (B, T, D)
        lam = torch.sigmoid(self.mixing)
        for _ in range(self.cfg.rounds):
            levels = [torch.cat([zeros, h], 1)]
            for at in pooled_at:
                corners = levels[-1].index_select(1, at).unflatten(1, (T, len(CORNERS)))
                levels += [torch.cat([zeros, corners.sum(2) / len(CORNERS)], 1)]
            n = torch.cat(levels, 1).index_select(1, bonds_at).unflatten(1, (T, -1))  # (B, T, K, D)
            h = h + lam * (neighbour_attention(q, n, n, bias)[..., 0, :] - h)
        return self.o_proj(h)

    def init_state(self, batch: int) -> dict[str, Any]:
        """Per round r and scale ℓ, the last 2^ℓ(1 + L + L²) pooled sites of round r's input."""
        c, w = self.cfg, self.mixing
        sites = [[w.new_zeros(batch, n, c.d_model) for n in c.history] for _ in range(c.rounds)]
        return {"sites": sites, "pos": 0}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D): the R rounds for one new site."""
        c, pos = self.cfg, state["pos"]
        valid = (pos >= self.bond_offset)[None, :]
        q, h = self.q_proj(x_t)[:, None], self.v_proj(x_t)[:, None]  # (B, 1, D)
        lam = torch.sigmoid(self.mixing)
        rounds = []
        for past in state["sites"]:
            levels = [h]
            for scale in range(1, c.scales):
                finer, spacing = torch.cat([past[scale - 1], levels[-1]], 1), 2 ** (scale - 1)
                end = finer.shape[1] - 1
                corners = [finer[:, end - spacing * lattice_offset(u, c.side)] for u in CORNERS]
                levels.append(corner_mean(corners)[:, None])
            kept = [torch.cat([p, lv], 1) for p, lv in zip(past, levels, strict=True)]
            n = torch.stack([kept[scale][:, kept[scale].shape[1] - 1 - o] for scale, o in c.bonds], 1)
            h = h + lam * (self._message(q, n[:, None], valid) - h)
            rounds.append([k[:, 1:] for k in kept])
        return self.o_proj(h)[:, 0], {"sites": rounds, "pos": pos + 1}

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
