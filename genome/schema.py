"""Hyperparameter schemas: the machinery of gene kinds, and the structural and promoter settings.

A gene kind is a `KindSpec`: the base types it may sit on, the region types it may live in,
its params (type, default, sanity bounds) and its derivation (params written as 0 = "derive"
resolved against the structural settings, plus cross-field checks). Each built-in kind's spec
is one module of `genome.kinds`, registered into `KINDS` when that package is imported (which
`import genome` does). The block that a kind decodes to lives in `phenotype.blocks`: its
config class names the kind (`class FooConfig(BlockConfig, kind="foo", ...)`) and takes its
fields from the spec, so the schema, defaults and derivations exist once, here, torch-free.
Specs live in `genome/` because validation must not import the phenotype: a genome is
checked as data.

Bounds are sanity bounds, not search ranges: they refuse absurd genomes (a width of 10^12)
before anything is allocated, while admitting every published architecture we know of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

BASE_TYPES = ("A", "T", "C", "G")
REGION_TYPES = ("structural", "promoter", "coding", "regulatory")
EDGE_KINDS = ("activates", "represses", "shares", "loop")
ROLES = ("sequence", "channel", "regulatory")  # a block's role (`phenotype.blocks.base`)

MAX_WIDTH = 65_536
MAX_HIDDEN = 262_144
# Upper bound on layers in a genome, to refuse absurd stacks before building anything.
MAX_LAYERS = 2048


@dataclass(frozen=True)
class ParamSpec:
    """One hyperparameter: its type, default and admissible values.

    `type` is one of "int", "float", "bool", "choice". Ints must be real integers (a YAML
    float such as 12.0 is refused: a silent truncation would change the architecture).
    """

    type: str
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""

    def check(self, name: str, value: Any) -> Any:
        """Return `value` if admissible, else raise ValueError with a one-line reason."""
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r:.40}")
            return value
        if self.type == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"{name} must be one of {', '.join(self.choices)}, got {value!r:.40}")
            return value
        if self.type == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r:.40}")
        elif self.type == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r:.40}")
            try:
                value = float(value)
            except OverflowError:  # an integer past float range (YAML reads 1000…0 as int)
                raise ValueError(
                    f"{name} must be finite, got an integer of {value.bit_length()} bits"
                ) from None
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"{name} must be finite, got {value!r}")
        else:  # pragma: no cover - schema authoring error
            raise AssertionError(f"unknown param type {self.type}")
        if self.low is not None and value < self.low:
            raise ValueError(f"{name}={value} is below the minimum {self.low:g}")
        if self.high is not None and value > self.high:
            raise ValueError(f"{name}={value} is above the maximum {self.high:g}")
        return value


def integer(default: int, low: int, high: int, doc: str = "") -> ParamSpec:
    return ParamSpec("int", default, low, high, doc=doc)


def real(default: float, low: float, high: float, doc: str = "") -> ParamSpec:
    return ParamSpec("float", default, low, high, doc=doc)


def flag(default: bool, doc: str = "") -> ParamSpec:
    return ParamSpec("bool", default, doc=doc)


def choice(default: str, *choices: str, doc: str = "") -> ParamSpec:
    return ParamSpec("choice", default, choices=choices, doc=doc)


def fill(specs: Mapping[str, ParamSpec], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every param of `specs`: a given value checked (ValueError says why), else its default.
    Names that `specs` does not know are the caller's to refuse."""
    return {
        name: spec.check(name, given[name]) if name in given else spec.default for name, spec in specs.items()
    }


Derive = Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]
"""(params with defaults filled, structural settings) -> params with every "derive" (0)
resolved; raises ValueError when the params do not fit together or with the structure."""


def _as_given(params: dict[str, Any], structural: Mapping[str, Any]) -> dict[str, Any]:
    return params


@dataclass(frozen=True)
class KindSpec:
    """A gene kind: the base types it may sit on, the regions it may live in, its params and
    how params written as 0 ("derive") are resolved.

    `params` maps name -> ParamSpec. Derived params default to 0, which `derive` replaces by
    the value the structural settings imply (for example `head_dim` = d_model / heads), so
    that two spellings of one architecture have one canonical form and one id.
    """

    kind: str
    bases: tuple[str, ...]
    params: dict[str, ParamSpec] = field(default_factory=dict)
    regions: tuple[str, ...] = ("coding",)
    doc: str = ""
    derive: Derive = _as_given
    # What the search must know of a plugin kind without its block (torch-free): `role` is
    # its block's role ("sequence", "channel", "regulatory"), required of a plugin and
    # checked against the block when the plugin loads; `family` groups it for
    # `kind_substitution` (None: a family of its own). The built-ins leave both None: the
    # search's tables (`evolution.spaces.dogma.guards`) name them.
    role: str | None = None
    family: str | None = None

    def complete(self, given: Mapping[str, Any], structural: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical params of a gene of this kind given some of them: checked, the rest
        defaulted, derived params resolved (ValueError says what does not fit)."""
        unknown = [name for name in given if name not in self.params]
        if unknown:
            raise ValueError(f"{self.kind}: unknown param {str(unknown[0])!r:.60}")
        return self.derive(fill(self.params, given), structural)


KINDS: dict[str, KindSpec] = {}
"""Every registered gene kind, in registration order (seeded searches draw kinds from this
order, so new kinds are appended: see `genome.kinds`)."""


def as_recorded(params: dict[str, Any], structural: Mapping[str, Any]) -> dict[str, Any]:
    """The derivation of a stand-in gene (`genome.kinds.register_recorded`): a stored
    genome's params are canonical already, so nothing is derived."""
    return params


def register_kind(spec: KindSpec) -> KindSpec:
    """Add a gene kind to `KINDS`; each kind's module calls this once, at import. A plugin's
    real gene replaces the stand-in a reader registered for it (`as_recorded`)."""
    if spec.kind in KINDS and KINDS[spec.kind].derive is not as_recorded:
        raise ValueError(f"gene kind {spec.kind!r} registered twice")
    for b in spec.bases:
        if b not in BASE_TYPES:
            raise ValueError(f"kind {spec.kind!r} names unknown base type {b!r}")
    for r in spec.regions:
        if r not in ("coding", "regulatory"):
            raise ValueError(f"kind {spec.kind!r} names a region type without bases: {r!r}")
    if spec.role is not None and spec.role not in ROLES:
        raise ValueError(f"kind {spec.kind!r}: role must be one of {', '.join(ROLES)}, got {spec.role!r}")
    KINDS[spec.kind] = spec
    return spec


# Global settings of the structural region.
STRUCTURAL: dict[str, ParamSpec] = {
    "d_model": integer(256, 8, MAX_WIDTH, "residual width"),
    "vocab": integer(256, 2, 4_194_304, "vocabulary size"),
    "max_len": integer(2048, 1, 1 << 24, "longest context (learned positions' table size)"),
    "positions": choice("rope", "none", "learned", "rope", "sinusoidal", "alibi"),
    "rope_theta": real(10_000.0, 1.0, 1e9),
    "norm": choice("rmsnorm", "layernorm", "rmsnorm"),
    "norm_position": choice(
        "pre",
        "pre",
        "post",
        "pre_embed",
        doc="pre_embed: pre-norm plus a norm on the embeddings (RWKV ln0, BLOOM)",
    ),
    "norm_eps": real(1e-5, 1e-12, 1e-1),
    "bias": flag(False, "biases in linear layers and LayerNorm"),
    "tie_embeddings": flag(True, "output head shares the token embedding"),
}

# Expression settings of a promoter region (they apply to the coding region it precedes).
PROMOTER: dict[str, ParamSpec] = {
    "copies": integer(1, 1, 512, "how many times the coding region is stacked (own weights)"),
    "expressed": flag(True, "false silences the coding region entirely"),
    "strength": real(1.0, 0.0, 16.0, "constant scale on the region's residual updates"),
}
