"""What a DOGMA genome needs before it is worth training: an expressed sequence mixer.

A *sequence mixer* is a block that moves information between positions: the output at
token t reads tokens s < t. Its kinds are the ones whose phenotype block is registered with
`role="sequence"` (`phenotype.blocks`, `class FooConfig(BlockConfig, kind=..., role=...)`):
softmax attention (`attention`, `mla`, `strand_attention`), state-space scans (`mamba`,
`mamba2`, `s4`), recurrences (`lstm`, `gru`, `rglru`), linear attention and retention
(`linear_attention`, `retention`, `rwkv`), the causal convolution `conv`, and DOGMA's
memories (`dna`, `epigenetic`, `tetra_reach`, `tetra`). `SEQUENCE_MIXERS` is that set, kept
here as data so this module (imported by the operators, which the light `space` module
imports) needs no torch; `tests/evolution/spaces/dogma/test_guards.py` checks it against
`phenotype.registry.REGISTRY`. `rwkv_channel` is a channel mixer there (its token shift
reads only t-1) and so is not counted.

A gene of a mixing kind can still mix nothing, knowably before training:

- `attention` / `strand_attention` with `window = 1`: o_t = Σ_{s ≤ t, t-s < 1} … = v_t, each
  token attends to itself only (unless `global_every = n` makes some of its copies global,
  which needs at least n copies);
- `conv` with `kernel = 1`: y_t = b + w_0 ⊙ x_t, a per-token scale.

A region is *expressed* when its promoter (the promoter region just before it, if any; the
decoder's rule, `genome.Genome.promoter_of` and `phenotype.config.model_config`) has
`expressed: true` and a positive `strength` (strength 0 scales every update of the region to
zero, x + g·0·f(x) = x). Regulatory gates are learned (σ(·) ∈ (0, 1)), so they silence
nothing by construction.

Without an expressed mixer the logits at t are a function of token t alone: the model is at
best a bigram table, and it cannot beat chance on a task that needs context. `prefilter`
says so in one line, before anything is trained.

Everything here reads canonical documents (`Genome.to_dict()`, every param filled in) or
genomes; nothing draws randomness.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NamedTuple

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.genome import KINDS, PROMOTER, STRUCTURAL, Genome
from dogma_evolve.genome.kinds import is_built_in

Doc = dict[str, Any]

SEQUENCE_MIXERS: frozenset[str] = frozenset(
    {
        "attention",
        "mla",
        "strand_attention",
        "mamba",
        "mamba2",
        "s4",
        "lstm",
        "gru",
        "rglru",
        "linear_attention",
        "retention",
        "rwkv",
        "conv",
        "dna",
        "epigenetic",
        "tetra_reach",
        "tetra",
    }
)
"""Kinds whose block mixes positions (the phenotype's `role="sequence"`)."""

FAMILY: dict[str, str] = {
    # softmax-like attention: o_t = Σ_s softmax_s(score(q_t, k_s)) v_s
    "attention": "softmax_attention",
    "mla": "softmax_attention",
    "strand_attention": "softmax_attention",
    # selective / structured state-space scans: h_t = Ā_t h_{t-1} + B̄_t x_t
    "mamba": "ssm",
    "mamba2": "ssm",
    "s4": "ssm",
    # gated (non-linear or diagonal) recurrences
    "lstm": "rnn",
    "gru": "rnn",
    "rglru": "rnn",
    # linear attention and retention: S_t = γ S_{t-1} + k_t v_tᵀ, o_t = q_t S_t
    "linear_attention": "linear_attention",
    "retention": "linear_attention",
    "rwkv": "linear_attention",
    # short causal convolution over time
    "conv": "convolution",
    # per-token channel mixers
    "mlp": "channel",
    "swiglu": "channel",
    "geglu": "channel",
    "moe": "channel",
    "rwkv_channel": "channel",
    "expression": "channel",
    # DOGMA's own memories and compute block
    "dna": "dogma",
    "epigenetic": "dogma",
    "tetra_reach": "dogma",
    "tetra": "dogma",
    # regulators (C bases in regulatory regions)
    "gate": "regulatory",
    "allosteric": "regulatory",
}
"""Every kind's family: what `kind_substitution` stays within most of the time."""

WINDOWED = ("attention", "strand_attention")
"""Kinds whose `window` means a sliding attention window (0 = global, 1 = self only)."""


class Mixer(NamedTuple):
    """One expressed sequence-mixing base: its region's id, index and position in the
    document's region list, its index in the region, its kind."""

    region: str
    region_index: int
    base: int
    kind: str


def family(kind: str) -> str:
    """The family of `kind` (`FAMILY`, else a plugin kind's `KindSpec.family`); a kind
    without one is its own."""
    spec = KINDS.get(kind)
    return FAMILY.get(kind) or (spec.family if spec is not None else None) or kind


def is_sequence_mixer(kind: str) -> bool:
    """Whether `kind` mixes positions: a built-in of `SEQUENCE_MIXERS`, or a plugin kind
    whose spec states `role="sequence"` (checked against its block when it loaded)."""
    spec = KINDS.get(kind)
    return kind in SEQUENCE_MIXERS or (spec is not None and spec.role == "sequence")


def mixes_positions(kind: str, params: dict[str, Any], copies: int = 1) -> bool:
    """Whether a gene of `kind` with (canonical) `params`, stacked `copies` times, lets some
    token read another: its kind is a sequence mixer and it is not one of the degenerate
    cases of the module docstring (self-only attention, a length-1 convolution)."""
    if not is_sequence_mixer(kind):
        return False
    if kind in WINDOWED and params.get("window") == 1:
        every = int(params.get("global_every") or 0)
        return 0 < every <= copies  # copy c is global when (c + 1) % every == 0
    return not (kind == "conv" and params.get("kernel") == 1)


def expression_of(doc: Doc, index: int) -> dict[str, Any]:
    """The expression settings (copies, expressed, strength) that apply to region `index`
    of `doc`: its promoter's, defaults filled in (`Genome.promoter_of`)."""
    out = {name: spec.default for name, spec in PROMOTER.items()}
    regions = doc["regions"]
    if index > 0 and regions[index - 1].get("type") == "promoter":
        out.update(regions[index - 1].get("settings") or {})
    return out


def is_expressed(doc: Doc, index: int) -> bool:
    """Coding region `index` contributes to the model: expressed, with positive strength."""
    expression = expression_of(doc, index)
    return bool(expression["expressed"]) and float(expression["strength"]) > 0


def expressed_coding(doc: Doc) -> list[int]:
    """Indices of the coding regions of `doc` that contribute to the model."""
    return [i for i, r in enumerate(doc["regions"]) if r.get("type") == "coding" and is_expressed(doc, i)]


def mixers_of_doc(doc: Doc) -> list[Mixer]:
    """The expressed sequence-mixing bases of a canonical document, in genome order."""
    out = []
    for i in expressed_coding(doc):
        region = doc["regions"][i]
        copies = int(expression_of(doc, i)["copies"])
        for j, b in enumerate(region.get("bases", [])):
            if mixes_positions(b.get("kind", ""), b.get("params") or {}, copies):
                out.append(Mixer(region["id"], i, j, b["kind"]))
    return out


def expressed_mixers(genome: Genome) -> list[Mixer]:
    """The sequence mixers of `genome` that the decoded model really runs: bases of a mixing
    kind (and non-degenerate params) in coding regions that are expressed."""
    return mixers_of_doc(genome.to_dict())


def prefilter(genome: Genome) -> str | None:
    """A one-line reason when `genome` cannot beat chance on a sequence task by
    construction (no expressed coding region, or no expressed sequence mixer: every
    prediction then reads only its own token); None when it may."""
    doc = genome.to_dict()
    if not expressed_coding(doc):
        return "no expressed coding region: the model is its embeddings and head alone"
    if not mixers_of_doc(doc):
        present = sorted(
            {b.gene.kind for r in genome.regions for b in r.bases if is_sequence_mixer(b.gene.kind)}
        )
        why = f" ({', '.join(present)} silenced or degenerate)" if present else ""
        return f"no expressed sequence mixer{why}: each position sees only its own token"
    return None


def expressed_view(doc: Doc) -> Doc:
    """`doc` as the decoder sees it: silenced coding regions (and their promoters, and every
    edge that touches them) removed, each promoter folded into its coding region as that
    region's full expression settings. Two documents with equal views decode to the same
    model (region ids aside from the promoters'), so a variation that leaves the view
    unchanged changed nothing that trains."""
    regions = doc["regions"]
    out: list[Doc] = []
    silenced = set()
    for i, r in enumerate(regions):
        if r.get("type") == "promoter":
            continue
        if r.get("type") == "coding":
            expression = expression_of(doc, i)
            if not expression["expressed"]:
                silenced.add(r["id"])
                continue
            out.append({**r, "expression": expression})
        else:
            out.append(dict(r))
    edges = [e for e in doc.get("edges", []) if e["source"] not in silenced and e["target"] not in silenced]
    return {"regions": out, "edges": sorted(edges, key=lambda e: (e["source"], e["target"], e["kind"]))}


def check_child(op: str, parents: list[Doc], child: Doc) -> None:
    """Raise Discard when the (canonical, repaired) `child` of operator `op` lost what its
    parents had: every expressed sequence mixer, or every expressed coding region; or, for
    `promoter_change`, when it decodes to its parent's model (`expressed_view`)."""
    if any(expressed_coding(p) for p in parents) and not expressed_coding(child):
        raise Discard(f"{op}: the child expresses no coding region")
    if any(mixers_of_doc(p) for p in parents) and not mixers_of_doc(child):
        raise Discard(f"{op}: the child has no expressed sequence mixer (its parent had one)")
    if op == "promoter_change" and expressed_view(child) == expressed_view(parents[0]):
        raise Discard(f"{op}: the child decodes to its parent's model")


# -- ordered steps: small moves where a value has an order ------------------------------
MAX_WINDOWS = 4  # real sliding windows among the `window` values, besides global


def window_values(max_len: int) -> tuple[int, ...]:
    """The `window` values of attention a step moves along: 0 (global), then the
    `MAX_WINDOWS` largest powers of two (at least 2) below the context `max_len`, halving.
    A window ≥ max_len is global in effect and 1 attends to the token itself only, so
    neither is among them."""
    windows: list[int] = []
    w = 1 << max(1, (max_len - 1).bit_length() - 1)
    while w >= 2 and w < max_len and len(windows) < MAX_WINDOWS:
        windows.append(w)
        w //= 2
    return (0, *windows)


def neighbour_value(
    values: tuple[Any, ...],
    value: Any,
    rng: random.Random,
    distance: Callable[[Any, Any], float] | None = None,
) -> Any:
    """A neighbour of `value` among the ordered `values`: the next one up or down; a value
    not among them moves to one beside it (the nearest below or above, by `distance(a, b)`,
    default |a - b|). Raises Discard when `values` offer nothing but `value`."""
    gap = distance or (lambda a, b: abs(a - b))
    if value in values:
        k = values.index(value)
        moves = [values[i] for i in (k - 1, k + 1) if 0 <= i < len(values)]
    else:
        moves = sorted(values, key=lambda other: gap(other, value))[:2]
    if not moves:
        raise Discard(f"no neighbour of {value!r} among {values}")
    return rng.choice(moves)


def _window_distance(max_len: int) -> Callable[[int, int], float]:
    def gap(a: int, b: int) -> float:
        a, b = (max_len if x == 0 or x >= max_len else x for x in (a, b))
        return abs(a.bit_length() - b.bit_length()) + abs(a - b) / max_len

    return gap


def step_window(params: dict[str, Any], structural: dict[str, Any], rng: random.Random) -> int:
    """The next `window` of an attention gene (`window_values`); a window ≥ the context
    counts as global. Going global also drops `global_every` (it needs a window)."""
    max_len = int(structural.get("max_len", STRUCTURAL["max_len"].default))
    value = params.get("window", 0)
    current = 0 if value >= max_len else value
    after = neighbour_value(window_values(max_len), current, rng, _window_distance(max_len))
    if after == 0 and params.get("global_every"):
        params["global_every"] = 0
    return int(after)


# Related positional schemes: relative (rope, alibi), absolute (learned, sinusoidal), none.
POSITION_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "rope": ("alibi", "none", "learned"),
    "alibi": ("rope", "none"),
    "none": ("rope", "alibi"),
    "learned": ("sinusoidal", "rope"),
    "sinusoidal": ("learned", "rope"),
}


SEED_WIDTHS = (32, 48, 64, 96)  # the widths of the space's seeds and random genomes (`seeds`)


def width_values() -> tuple[int, ...]:
    """The `d_model` values a structural step moves along: the seed widths
    (`SEED_WIDTHS`), sorted, within the structural bounds."""
    spec = STRUCTURAL["d_model"]
    return tuple(sorted(w for w in set(SEED_WIDTHS) if spec.low <= w <= spec.high))  # type: ignore[operator]


def check_kinds() -> list[str]:
    """Built-in kinds that `FAMILY` does not name (empty when the table is complete; a
    plugin's kind states its own family, or has none)."""
    return [k for k in KINDS if is_built_in(k) and k not in FAMILY]


__all__ = [
    "FAMILY",
    "MAX_WINDOWS",
    "POSITION_NEIGHBOURS",
    "SEQUENCE_MIXERS",
    "WINDOWED",
    "Mixer",
    "check_child",
    "check_kinds",
    "expressed_coding",
    "expressed_mixers",
    "expressed_view",
    "expression_of",
    "family",
    "is_expressed",
    "is_sequence_mixer",
    "mixers_of_doc",
    "neighbour_value",
    "mixes_positions",
    "prefilter",
    "step_window",
    "width_values",
    "window_values",
]
