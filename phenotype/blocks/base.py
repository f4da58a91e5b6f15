"""The contract every block honours: the config base class, the mixer base class, the registry.

A block kind's gene is its `KindSpec` in `genome.kinds` (params, bounds, defaults,
derivations; torch-free, so genomes validate without the phenotype). Its block is a frozen
config dataclass that names the kind and its role in its class header,

    @dataclass(frozen=True)
    class FooConfig(BlockConfig, kind="foo", role="sequence"):
        width: int          # one field per param of the spec, no defaults of its own

and is registered in `REGISTRY` when its module is imported (`phenotype.blocks` imports
every module of the package). `from_gene` builds it from a genome's resolved params; `of`
builds it from some params, taking the rest from the spec, as a genome would.

Every config answers, analytically and without building anything:

- `num_params()` — parameters of the built module;
- `active_params()` — parameters touched per token (differs from num_params for MoE);
- `flops_per_token(seq_len)` — forward FLOPs of the dense linear algebra the module runs
  (linear layers, convolutions, attention score and value products, counted as
  FlopCounterMode counts them: 2 per multiply-add) plus `extra_flops_per_token()`, the
  elementwise work of scans that a FLOP counter cannot see;
- `state_per_token()` / `state_fixed()` — inference-state elements that grow with context
  (a KV cache) and that do not (a recurrent state); `state_elements(seq_len)` the exact
  count after `seq_len` tokens (a sliding window's cache stops growing at the window).

`build()` returns the module, a `Mixer` (zoology's protocol): `forward(x: (B, T, D)) ->
(B, T, D)`, `init_state(batch)`, `step(x_t: (B, D), state) -> (y_t: (B, D), state)`, and
`state_size(seq_len)` in elements, equal to what `init_state` + `step` really allocate.
Channel mixers are stateless: their `step` is `forward` on one token.

A layer's state has two parts. The mixer's own state is carried in time, per layer (`step`).
The `Carry` is carried along the stack within one pass (one sequence, or one token): the
model hands the same dict to every layer in order, through `forward_carried` and
`step_carried`; a mixer that passes something to later blocks (epigenetic marks) reads and
writes its own key, every other mixer ignores it. The model never looks inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

import torch
from torch import nn

from dogma_evolve.genome.schema import KINDS, ROLES, STRUCTURAL, KindSpec


@dataclass(frozen=True)
class BlockSpec:
    """A registered block: its gene kind, config class and role ("sequence": a token mixer,
    "channel": per token, "regulatory": acts between regions)."""

    kind: str
    config: type[BlockConfig]
    role: str

    @property
    def schema(self) -> KindSpec:
        return KINDS[self.kind]


REGISTRY: dict[str, BlockSpec] = {}
"""Gene kind -> its block, filled as block modules are imported."""


@dataclass(frozen=True)
class BlockConfig:
    """Base class of block configs. `d_model` and `bias` come from the structural region."""

    d_model: int
    bias: bool
    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str | None = None, role: str | None = None, **kwargs: Any) -> None:
        """`class FooConfig(BlockConfig, kind="foo", role="sequence")` registers the block of
        gene kind "foo" (whose `KindSpec` must be registered first)."""
        super().__init_subclass__(**kwargs)
        if kind is None:
            return
        if kind not in KINDS:
            raise ValueError(f"block for unknown gene kind {kind!r}: register its KindSpec first")
        if role not in ROLES:
            raise ValueError(f"block {kind!r}: role must be one of {', '.join(ROLES)}, got {role!r}")
        stated = getattr(KINDS.get(kind), "role", None)  # an exported package has no specs
        if stated not in (None, role):
            raise ValueError(f"block {kind!r}: role {role!r} is not its gene's role {stated!r}")
        if kind in REGISTRY:
            raise ValueError(f"block for gene kind {kind!r} registered twice")
        cls.kind = kind
        REGISTRY[kind] = BlockSpec(kind, cls, role)

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: Mapping[str, Any], layer_idx: int = 0) -> Self:
        """The config of one layer from a gene's resolved params; `layer_idx` is the copy
        index within its coding region (what per-layer patterns such as local:global
        attention interleaving read)."""
        return cls(d_model=structural["d_model"], bias=structural["bias"], **params)

    @classmethod
    def of(
        cls,
        d_model: int,
        bias: bool = False,
        *,
        structural: Mapping[str, Any] | None = None,
        layer_idx: int = 0,
        **params: Any,
    ) -> Self:
        """The config a genome would decode this gene to: params not given take the kind's
        defaults and derivations, structural settings not given their defaults. For building
        one block without a genome (tests, benchmarks); ValueError on params that do not fit."""
        settings = {name: spec.default for name, spec in STRUCTURAL.items()}
        settings.update(structural or {}, d_model=d_model, bias=bias)
        return cls.from_gene(KINDS[cls.kind].complete(params, settings), settings, layer_idx)

    def build(self) -> nn.Module:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def num_params(self) -> int:  # pragma: no cover
        raise NotImplementedError

    def active_params(self) -> int:
        return self.num_params()

    def flops_per_token(self, seq_len: int) -> int:  # pragma: no cover
        raise NotImplementedError

    def extra_flops_per_token(self) -> int:
        return 0

    def state_per_token(self) -> int:
        return 0

    def state_fixed(self) -> int:
        return 0

    def state_elements(self, seq_len: int) -> int:
        """Inference-state elements after `seq_len` tokens: what the module's
        `state_size(seq_len)` must equal."""
        return self.state_per_token() * seq_len + self.state_fixed()


def linear_params(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


Carry = dict[str, torch.Tensor]
"""What mixers hand later mixers within one pass, by key (see the module docstring)."""

C = TypeVar("C", bound=BlockConfig)


class Mixer(nn.Module, Generic[C]):
    """A block's module (the contract in the module docstring), built from config `cfg`."""

    cfg: C

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - every block overrides
        raise NotImplementedError

    def init_state(self, batch: int) -> Any:  # pragma: no cover
        raise NotImplementedError

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:  # pragma: no cover
        raise NotImplementedError

    def state_size(self, seq_len: int) -> int:  # pragma: no cover
        raise NotImplementedError

    def forward_carried(self, x: torch.Tensor, carry: Carry) -> torch.Tensor:
        """`forward` inside a stack: a mixer that hands something on reads and writes `carry`."""
        return self(x)

    def step_carried(self, x_t: torch.Tensor, state: Any, carry: Carry) -> tuple[torch.Tensor, Any]:
        """`step` inside a stack, with the carry of this token."""
        return self.step(x_t, state)


class ChannelMixer(Mixer[C]):
    """Stateless per-token mixers: `step` is `forward` on one token, no state."""

    def init_state(self, batch: int) -> None:
        return None

    def step(self, x_t: torch.Tensor, state: None) -> tuple[torch.Tensor, None]:
        return self.forward(x_t[:, None])[:, 0], state

    def state_size(self, seq_len: int) -> int:
        return 0


def depthwise_conv_step(conv: nn.Conv1d, window: torch.Tensor) -> torch.Tensor:
    """The newest output of a causal depthwise convolution with bias from its last k inputs,
    window (B, C, k): what `step` computes where `forward` runs `conv` over the sequence."""
    assert conv.bias is not None, "a depthwise step needs the convolution's bias"
    return (window * conv.weight[:, 0]).sum(-1) + conv.bias


def no_weight_decay(*params: nn.Parameter) -> None:
    """Tag parameters that must not decay (A_log, D, dt_bias, norms): the trainer reads it."""
    for p in params:
        p._no_weight_decay = True  # type: ignore[attr-defined]
