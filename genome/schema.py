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


register_kind(
    KindSchema(
        "attention",
        ("T",),
        {
            "heads": _int(4, 1, 1024, "query heads"),
            "kv_heads": _int(0, 0, 1024, "key-value heads; 0 = heads (MHA), 1 = MQA, else GQA"),
            "head_dim": _int(0, 0, 1024, "0 = d_model / heads"),
            "window": _int(0, 0, 1 << 24, "sliding-window length; 0 = full causal attention"),
            "qk_norm": _bool(False, "RMS-normalise queries and keys per head"),
            "global_every": _int(
                0,
                0,
                1024,
                "local:global interleave: with a window, copy c of "
                "the region attends globally when (c+1) % global_every == 0",
            ),
        },
        doc="causal softmax attention (MHA, GQA, MQA, sliding window, local:global) via SDPA",
    )
)
register_kind(
    KindSchema(
        "mamba",
        ("T",),
        {
            "d_state": _int(16, 1, 1024),
            "expand": _int(2, 1, 16),
            "d_conv": _int(4, 1, 64),
            "dt_rank": _int(0, 0, _MAX_WIDTH, "0 = ceil(d_model / 16)"),
        },
        doc="Mamba selective state-space mixer (Gu & Dao, 2023)",
    )
)
register_kind(
    KindSchema(
        "mlp",
        ("A",),
        {
            "hidden": _int(0, 0, _MAX_HIDDEN, "0 = 4 * d_model"),
            "activation": _choice("gelu", "gelu", "relu"),
        },
        doc="two-layer MLP channel mixer",
    )
)
register_kind(
    KindSchema(
        "swiglu",
        ("A",),
        {"hidden": _int(0, 0, _MAX_HIDDEN, "0 = the LLaMA rule 2/3 * 4 * d_model, rounded to 8")},
        doc="gated SiLU MLP (Shazeer, 2020)",
    )
)
register_kind(
    KindSchema(
        "gate",
        ("C",),
        {"hidden": _int(16, 1, 4096, "width of the regulatory signal")},
        regions=("regulatory",),
        doc="regulation gate: a per-token signal that activates or represses target regions",
    )
)

register_kind(
    KindSchema(
        "mla",
        ("T",),
        {
            "heads": _int(4, 1, 1024),
            "head_dim": _int(0, 0, 1024, "per-head query/key width without position; 0 = d/heads"),
            "rope_dim": _int(8, 0, 1024, "decoupled RoPE width (even; 0 = no positions)"),
            "v_head_dim": _int(0, 0, 1024, "0 = head_dim"),
            "kv_rank": _int(0, 0, _MAX_WIDTH, "the cached latent's width; 0 = 4 * head_dim"),
            "q_rank": _int(0, 0, _MAX_WIDTH, "query compression rank; 0 = none"),
        },
        doc="multi-head latent attention (DeepSeek-V2): the KV cache is a low-rank latent",
    )
)
register_kind(
    KindSchema(
        "geglu",
        ("A",),
        {"hidden": _int(0, 0, _MAX_HIDDEN, "0 = the LLaMA rule 2/3 * 4 * d_model, rounded to 8")},
        doc="gated GELU MLP (Shazeer, 2020)",
    )
)
register_kind(
    KindSchema(
        "moe",
        ("A",),
        {
            "experts": _int(8, 1, 1024),
            "top_k": _int(2, 1, 64, "experts per token (at most experts)"),
            "hidden": _int(0, 0, _MAX_HIDDEN, "per expert; 0 = the expert's own default rule"),
            "expert": _choice("swiglu", "swiglu", "geglu", "gelu", "relu"),
            "shared": _int(0, 0, 64, "always-on shared experts (DeepSeekMoE), fused into one"),
            "aux_weight": _float(0.01, 0.0, 10.0, "weight of the Switch load-balancing loss"),
        },
        doc="mixture of experts with top-k routing and a load-balancing loss",
    )
)
register_kind(
    KindSchema(
        "conv",
        ("T",),
        {"kernel": _int(4, 1, 1024, "filter length (causal, depthwise)")},
        doc="causal short depthwise convolution",
    )
)

register_kind(
    KindSchema(
        "s4",
        ("T",),
        {
            "d_state": _int(16, 2, 4096, "real state dimensions per channel (even: complex pairs)"),
            "init": _choice("legs", "legs", "lin", doc="S4D-LegS (HiPPO) or S4D-Lin eigenvalues"),
        },
        doc="S4D diagonal state space: FFT convolution in training, recurrence at inference",
    )
)
register_kind(
    KindSchema(
        "lstm",
        ("T",),
        {"hidden": _int(0, 0, _MAX_WIDTH, "0 = d_model")},
        doc="LSTM recurrence (fused kernels) with an output projection",
    )
)
register_kind(
    KindSchema(
        "gru",
        ("T",),
        {"hidden": _int(0, 0, _MAX_WIDTH, "0 = d_model")},
        doc="GRU recurrence (fused kernels) with an output projection",
    )
)

register_kind(
    KindSchema(
        "mamba2",
        ("T",),
        {
            "d_state": _int(16, 1, 1024),
            "expand": _int(2, 1, 16),
            "head_dim": _int(0, 0, 4096, "0 = 64 where it divides expand*d_model, else one head"),
            "d_conv": _int(4, 1, 64),
        },
        doc="Mamba-2 (SSD): scalar decay per head, chunked scan in training",
    )
)
register_kind(
    KindSchema(
        "rglru",
        ("T",),
        {
            "width": _int(0, 0, _MAX_WIDTH, "recurrence width; 0 = d_model"),
            "heads": _int(4, 1, 1024, "blocks of the block-diagonal gates (divides width)"),
            "d_conv": _int(4, 1, 64),
        },
        doc="Hawk/Griffin recurrent block with the real-gated linear recurrent unit",
    )
)
register_kind(
    KindSchema(
        "linear_attention",
        ("T",),
        {
            "heads": _int(4, 1, 1024),
            "head_dim": _int(0, 0, 1024, "0 = d_model / heads"),
            "feature": _choice("elu", "elu", "relu", doc="feature map: elu(x)+1 or relu(x)"),
        },
        doc="causal linear attention with a kernel feature map (Katharopoulos et al., 2020)",
    )
)
register_kind(
    KindSchema(
        "retention",
        ("T",),
        {
            "heads": _int(4, 1, 1024),
            "head_dim": _int(0, 0, 1024, "key width per head (even); 0 = d_model / heads"),
            "v_head_dim": _int(0, 0, 2048, "value width per head; 0 = head_dim"),
        },
        doc="RetNet multi-scale retention (fixed per-head decays)",
    )
)
register_kind(
    KindSchema(
        "rwkv",
        ("T",),
        {},
        doc="RWKV-4 time mixing (token shift + WKV)",
    )
)
register_kind(
    KindSchema(
        "rwkv_channel",
        ("A",),
        {"hidden": _int(0, 0, _MAX_HIDDEN, "0 = 4 * d_model")},
        doc="RWKV-4 channel mixing (token shift + squared-ReLU MLP with a receptance gate)",
    )
)

register_kind(
    KindSchema(
        "dna",
        ("T",),
        {
            "width": _int(0, 0, _MAX_WIDTH, "channels of the automaton and double-strand paths; 0 = d_model"),
            "reactions": _int(8, 1, 4096, "strand-displacement reactions (path A)"),
            "d_state": _int(8, 1, 1024, "named species per automaton channel (path B)"),
            "species": _int(4, 2, 64, "states of each stochastic lane (path C)"),
            "lanes": _int(4, 1, 1024, "stochastic lanes (path C)"),
            "window": _int(4, 1, 256, "hybridisation window (path D)"),
        },
        doc="four-path DNA compute block: strand displacement, automaton, stochastic, double "
        "strand, mixed by a regulation gate",
    )
)
register_kind(
    KindSchema(
        "strand_attention",
        ("T",),
        {
            "heads": _int(4, 1, 1024),
            "kv_heads": _int(0, 0, 1024, "0 = heads"),
            "head_dim": _int(0, 0, 1024, "0 = d_model / heads"),
            "window": _int(0, 0, 1 << 24, "0 = full causal attention"),
            "qk_norm": _bool(False),
            "scales": _int(4, 1, 16, "short-range stacking terms of the hybridisation energy"),
        },
        doc="attention with a learned per-head hybridisation energy of the strands' distance",
    )
)
register_kind(
    KindSchema(
        "expression",
        ("G",),
        {
            "hidden": _int(0, 0, _MAX_HIDDEN, "0 = 4 * d_model"),
            "activation": _choice("gelu", "gelu", "silu"),
        },
        doc="expression folder: LayerNorm then an MLP that folds the representation",
    )
)
register_kind(
    KindSchema(
        "epigenetic",
        ("A",),
        {"slots": _int(16, 1, 4096, "marks per token, carried across blocks and chunks")},
        doc="epigenetic memory: gated marks handed from block to block and carried in time",
    )
)
register_kind(
    KindSchema(
        "tetra",
        ("A", "T"),
        {
            "window": _int(2, 0, 64, "local neighbours t-1..t-window"),
            "stride": _int(4, 2, 1024, "face neighbours at t - stride^j"),
            "levels": _int(2, 0, 8, "face levels j = 1..levels"),
            "rounds": _int(2, 1, 16, "message-passing rounds"),
        },
        doc="TetraMemory: message passing over a causal tetrahedral mesh, O(T·k·d)",
    )
)

register_kind(
    KindSchema(
        "allosteric",
        ("C",),
        {
            "k": _int(2, 1, 64, "targets each source region sends its summary to"),
            "width": _int(16, 1, 4096, "width of the summaries and receptors"),
        },
        regions=("regulatory",),
        doc="allosteric regulation: sparse top-k communication from earlier to later regions",
    )
)

# Global settings of the structural region.
STRUCTURAL: dict[str, ParamSpec] = {
    "d_model": _int(256, 8, _MAX_WIDTH, "residual width"),
    "vocab": _int(256, 2, 4_194_304, "vocabulary size"),
    "max_len": _int(2048, 1, 1 << 24, "longest context (learned positions' table size)"),
    "positions": _choice("rope", "none", "learned", "rope", "sinusoidal", "alibi"),
    "rope_theta": _float(10_000.0, 1.0, 1e9),
    "norm": _choice("rmsnorm", "layernorm", "rmsnorm"),
    "norm_position": _choice(
        "pre",
        "pre",
        "post",
        "pre_embed",
        doc="pre_embed: pre-norm plus a norm on the embeddings (RWKV ln0, BLOOM)",
    ),
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
