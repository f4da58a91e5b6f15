"""Hyperparameter schemas: which gene kinds exist, on which base types they are legal,
and what each hyperparameter may hold.

The schema lives in `genome/` (not in `phenotype/`) because validation must not import the
phenotype: a genome is checked as data. `phenotype.registry` maps the same kind names to
modules and cost models; a test asserts both tables name the same kinds.

Bounds are sanity bounds, not search ranges: they refuse absurd genomes (a width of 10^12)
before anything is allocated, while admitting every published architecture we know of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BASE_TYPES = ("A", "T", "C", "G")
BASE_TYPE_NAMES = {"A": "archival", "T": "transient", "C": "control", "G": "generative"}
REGION_TYPES = ("structural", "promoter", "coding", "regulatory")
EDGE_KINDS = ("activates", "represses", "shares", "loop")


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
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"{name} must be finite, got {value!r}")
        else:  # pragma: no cover - schema authoring error
            raise AssertionError(f"unknown param type {self.type}")
        if self.low is not None and value < self.low:
            raise ValueError(f"{name}={value} is below the minimum {self.low:g}")
        if self.high is not None and value > self.high:
            raise ValueError(f"{name}={value} is above the maximum {self.high:g}")
        return value


def _int(default: int, low: int, high: int, doc: str = "") -> ParamSpec:
    return ParamSpec("int", default, low, high, doc=doc)


def _float(default: float, low: float, high: float, doc: str = "") -> ParamSpec:
    return ParamSpec("float", default, low, high, doc=doc)


def _bool(default: bool, doc: str = "") -> ParamSpec:
    return ParamSpec("bool", default, doc=doc)


def _choice(default: str, *choices: str, doc: str = "") -> ParamSpec:
    return ParamSpec("choice", default, choices=choices, doc=doc)


@dataclass(frozen=True)
class KindSchema:
    """A gene kind: the base types it may sit on, the regions it may live in, its params.

    `params` maps name -> ParamSpec. A default of None means "derived from the structural
    settings" (for example `head_dim` = d_model / heads); such params accept 0 as "derive".
    """

    kind: str
    bases: tuple[str, ...]
    params: dict[str, ParamSpec] = field(default_factory=dict)
    regions: tuple[str, ...] = ("coding",)
    doc: str = ""


_MAX_WIDTH = 65_536
_MAX_HIDDEN = 262_144

KINDS: dict[str, KindSchema] = {}


def register_kind(schema: KindSchema) -> KindSchema:
    """Add a gene kind to the schema table (block families call this once at import)."""
    if schema.kind in KINDS:
        raise ValueError(f"gene kind {schema.kind!r} registered twice")
    for b in schema.bases:
        if b not in BASE_TYPES:
            raise ValueError(f"kind {schema.kind!r} names unknown base type {b!r}")
    KINDS[schema.kind] = schema
    return schema


register_kind(KindSchema(
    "attention", ("T",),
    {
        "heads": _int(4, 1, 1024, "query heads"),
        "kv_heads": _int(0, 0, 1024, "key-value heads; 0 = heads (MHA), 1 = MQA, else GQA"),
        "head_dim": _int(0, 0, 1024, "0 = d_model / heads"),
        "window": _int(0, 0, 1 << 24, "sliding-window length; 0 = full causal attention"),
        "qk_norm": _bool(False, "RMS-normalise queries and keys per head"),
    },
    doc="causal softmax attention (MHA, GQA, MQA, sliding window) through PyTorch SDPA",
))
register_kind(KindSchema(
    "mamba", ("T",),
    {
        "d_state": _int(16, 1, 1024),
        "expand": _int(2, 1, 16),
        "d_conv": _int(4, 1, 64),
        "dt_rank": _int(0, 0, _MAX_WIDTH, "0 = ceil(d_model / 16)"),
    },
    doc="Mamba selective state-space mixer (Gu & Dao, 2023)",
))
register_kind(KindSchema(
    "mlp", ("A",),
    {
        "hidden": _int(0, 0, _MAX_HIDDEN, "0 = 4 * d_model"),
        "activation": _choice("gelu", "gelu", "relu"),
    },
    doc="two-layer MLP channel mixer",
))
register_kind(KindSchema(
    "swiglu", ("A",),
    {"hidden": _int(0, 0, _MAX_HIDDEN, "0 = the LLaMA rule 2/3 * 4 * d_model, rounded to 8")},
    doc="gated SiLU MLP (Shazeer, 2020)",
))
register_kind(KindSchema(
    "gate", ("C",),
    {"hidden": _int(16, 1, 4096, "width of the regulatory signal")},
    regions=("regulatory",),
    doc="regulation gate: a per-token signal that activates or represses target regions",
))

# Global settings of the structural region.
STRUCTURAL: dict[str, ParamSpec] = {
    "d_model": _int(256, 8, _MAX_WIDTH, "residual width"),
    "vocab": _int(256, 2, 4_194_304, "vocabulary size"),
    "max_len": _int(2048, 1, 1 << 24, "longest context (learned positions' table size)"),
    "positions": _choice("rope", "none", "learned", "rope", "sinusoidal"),
    "rope_theta": _float(10_000.0, 1.0, 1e9),
    "norm": _choice("rmsnorm", "layernorm", "rmsnorm"),
    "norm_position": _choice("pre", "pre", "post"),
    "norm_eps": _float(1e-5, 1e-12, 1e-1),
    "bias": _bool(False, "biases in linear layers and LayerNorm"),
    "tie_embeddings": _bool(True, "output head shares the token embedding"),
}

# Expression settings of a promoter region (they apply to the coding region it precedes).
PROMOTER: dict[str, ParamSpec] = {
    "copies": _int(1, 1, 512, "how many times the coding region is stacked (own weights)"),
    "expressed": _bool(True, "false silences the coding region entirely"),
    "strength": _float(1.0, 0.0, 16.0, "constant scale on the region's residual updates"),
}

# Upper bound on layers in a genome, to refuse absurd stacks before building anything.
MAX_LAYERS = 2048
