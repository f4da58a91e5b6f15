"""`phenotype.breakdown`: the components sum exactly to `account`'s totals and to the built
module (every preset, hand-made and sampled genomes), and each component equals what the
built module's own submodules hold (parameters, state) and what a FLOP counter sees inside
them; `dogma-byte` builds on CPU with the breakdown's parameter count."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.evolution.spaces.dogma.operators import MUTATIONS
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome import PRESETS, Genome, preset
from dogma_evolve.phenotype import account, decode, model_config
from dogma_evolve.phenotype.accounting import state_elements
from dogma_evolve.phenotype.breakdown import (
    EDGES,
    EMBEDDING,
    HEAD,
    LOOPS,
    NORMS,
    POSITIONS,
    Breakdown,
    breakdown,
    family,
)
from dogma_evolve.phenotype.chapter_compare import allocation, applies, per_block_flops
from dogma_evolve.phenotype.chapter_table import (
    ALL_BLOCKS_TOTAL,
    ALLOCATION,
    ALLOCATION_TOTAL,
    BLOCKS,
    DNA_SHARE,
    PER_BLOCK_FLOPS,
    PER_BLOCK_TOTAL,
)
from dogma_evolve.phenotype.config import CodingStage, RegulatoryStage
from dogma_evolve.phenotype.model import DogmaModel
from tests.phenotype.phenotype_helpers import kernels_unseen

PINNED = {"vocab": 61, "max_len": 64}


def _base(b: str, kind: str, **params: Any) -> dict[str, Any]:
    return {"base": b, "kind": kind, "params": params}


MEMORY = [_base("T", "tetra_reach", rounds=2), _base("A", "epigenetic", slots=6)]
# Every model-level part at once: learned positions, the embeddings' norm, an untied head, a
# regulatory cascade, a represses edge, an allosteric router, a loop, a shared region, a
# mixture of experts.
EVERYTHING = {
    "regions": [
        {
            "id": "s0",
            "type": "structural",
            "settings": {
                "d_model": 32,
                "vocab": 61,
                "max_len": 64,
                "positions": "learned",
                "norm": "layernorm",
                "norm_position": "pre_embed",
                "bias": True,
                "tie_embeddings": False,
            },
        },
        {"id": "r0", "type": "regulatory", "bases": [_base("C", "gate", hidden=4)]},
        {"id": "r1", "type": "regulatory", "bases": [_base("C", "gate", hidden=8), _base("C", "allosteric")]},
        {"id": "p2", "type": "promoter", "settings": {"copies": 2}},
        {
            "id": "c2",
            "type": "coding",
            "bases": [
                _base("T", "attention", heads=4, window=4),
                _base("A", "moe", experts=3, top_k=2, hidden=16),
            ],
        },
        {"id": "c3", "type": "coding", "bases": MEMORY},
        {"id": "c4", "type": "coding", "bases": MEMORY},
    ],
    "edges": [
        {"source": "r0", "target": "r1", "kind": "activates"},  # a regulatory cascade
        {"source": "r1", "target": "c2", "kind": "represses"},
        {"source": "r1", "target": "c3", "kind": "activates"},
        {"source": "c2", "target": "c4", "kind": "loop"},
        {"source": "c3", "target": "c4", "kind": "shares"},
    ],
}


def sampled_genomes(n: int, seed: int = 0) -> list[Genome]:
    """Genomes the search would make: samples of the DOGMA space, each mutated a few times
    (so duplicated, shared, regulated and resized regions appear too)."""
    rng = random.Random(seed)
    space = DogmaSpace(PINNED, seq_len=64, max_params=2_000_000)
    out = []
    for _ in range(n):
        genome = space.sample(rng)
        for _ in range(3):
            try:
                child = space.mutate(genome, rng.choice(sorted(MUTATIONS)), rng).genome
                assert isinstance(child, Genome)
                genome = child
            except Discard:
                continue
        out.append(genome)
    return out


def assert_sums_to_totals(b: Breakdown, genome: Genome, seq_len: int) -> None:
    acct = account(genome, seq_len)
    for key in ("params", "active_params", "flops_per_token", "state_bytes_per_token", "state_bytes_fixed"):
        assert sum(getattr(c, key) for c in b.components) == getattr(acct, key), key
    assert b.state_bytes == sum(c.state_bytes for c in b.components) == 2 * state_elements(genome, seq_len)
    assert b.totals == acct
    per_block = b.per_block()
    outside = sum(c.flops_per_token for c in b.components if c.component in (HEAD,))
    assert per_block.flops_all_blocks == b.forward_flops(acct.flops_per_token - outside)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_sums_to_its_accounting_and_its_built_module(name):
    genome = preset(name)
    b = breakdown(genome, seq_len=512, batch=4)
    assert_sums_to_totals(b, genome, 512)
    assert sum(c.params for c in b.components) == decode(genome, "meta").num_params()


# -- component by component against the built module ------------------------------------------
def module_components(model: DogmaModel) -> dict[str, str]:
    """Submodule name prefix -> component, read off the built module's own structure."""
    names = {"embed.": EMBEDDING, "pos_embed.": POSITIONS, "embed_norm.": NORMS, "final_norm.": NORMS}
    names |= {"head.": HEAD, "loop_scales.": LOOPS, "edge_gates.": EDGES}
    for stage in model.cfg.stages:
        rid = stage.region_id
        if isinstance(stage, RegulatoryStage):
            names |= {f"stages.{rid}.{j}.": family("gate") for j in range(len(stage.gates))}
            names |= {f"routers.{rid}.{j}.": family("allosteric") for j in range(len(stage.routers))}
            continue
        for i, layer in enumerate(model.stages[rid]):
            names[f"stages.{rid}.{i}.norm."] = NORMS
            names[f"stages.{rid}.{i}.mixer."] = family(layer.mixer.cfg.kind)
    return names


def _component(name: str, names: dict[str, str]) -> str:
    return next(c for prefix, c in names.items() if (name + ".").startswith(prefix))


def built_params(model: DogmaModel) -> Counter[str]:
    names, out = module_components(model), Counter[str]()
    for pname, p in model.named_parameters():  # each shared or tied tensor once
        out[_component(pname, names)] += p.numel()
    return out


def built_state_bytes(model: DogmaModel, seq_len: int) -> Counter[str]:
    out = Counter[str]()
    for stage in model.cfg.stages:
        if isinstance(stage, CodingStage):
            for layer in model.stages[stage.region_id]:
                out[family(layer.mixer.cfg.kind)] += 2 * layer.mixer.state_size(seq_len)
    return out


def counted_flops_by_component(model: DogmaModel, seq_len: int) -> Counter[str]:
    """What FlopCounterMode counts inside each component's modules in one forward pass; the
    rest of the model's count (the head's matmul, run by the model itself) is the head's."""
    ids = torch.zeros(1, seq_len, dtype=torch.long)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(ids)
    counts = {name: sum(ops.values()) for name, ops in fc.get_flop_counts().items()}
    out = Counter[str]()
    for stage in model.cfg.stages:
        rid = stage.region_id
        if isinstance(stage, RegulatoryStage):
            for j in range(len(stage.gates)):
                out[family("gate")] += counts.get(f"DogmaModel.stages.{rid}.{j}", 0)
            for j in range(len(stage.routers)):
                out[family("allosteric")] += counts.get(f"DogmaModel.routers.{rid}.{j}", 0)
        else:
            for i, layer in enumerate(model.stages[rid]):  # the residual layer: mixer and norm
                out[family(layer.mixer.cfg.kind)] += counts.get(f"DogmaModel.stages.{rid}.{i}", 0)
        for key in model.edge_gates:  # the edges into this region, from any regulator
            if key.endswith(f"__{rid}"):
                out[EDGES] += counts.get(f"DogmaModel.edge_gates.{key}", 0)
    out[HEAD] = counts["Global"] - sum(out.values())
    return out


def test_each_component_is_what_the_built_module_holds_and_computes(monkeypatch):
    genomes = [Genome.from_dict(EVERYTHING), *sampled_genomes(4, seed=1)]
    genomes.append(Genome.from_dict(scale_down(PRESETS["dogma-byte"](), 32, 1, PINNED)))
    seq = 16
    for genome in genomes:
        torch.manual_seed(0)
        model = decode(genome).eval()
        b = breakdown(genome, seq_len=seq)
        ours = {c.component: c for c in b.components}
        assert built_params(model) == +Counter({n: c.params for n, c in ours.items()}), genome.sequence_view()
        assert built_state_bytes(model, seq) == +Counter({n: c.state_bytes for n, c in ours.items()})
        extra = Counter[str]()  # scan work the counter cannot see, declared by the blocks
        for layer in model._coding_layers():
            extra[family(layer.mixer.cfg.kind)] += layer.mixer.cfg.extra_flops_per_token()
        with kernels_unseen(monkeypatch):
            counted = counted_flops_by_component(model, seq)
        expected = Counter({n: seq * (c.flops_per_token - extra[n]) for n, c in ours.items()})
        assert +counted == +expected, genome.sequence_view()


def test_everything_genome_has_every_model_level_component():
    genome = Genome.from_dict(EVERYTHING)
    b = breakdown(genome, seq_len=64)
    assert_sums_to_totals(b, genome, 64)
    names = [c.component for c in b.components]
    assert names[:2] == [EMBEDDING, POSITIONS] and names[-4:] == [NORMS, EDGES, LOOPS, HEAD]
    edges = b.component(EDGES)
    assert edges is not None and edges.instances == 3 and sorted(edges.kinds) == ["activates", "represses"]
    assert edges.params == (4 + 1) + 2 * (8 + 1)  # r0 -> r1 reads r0's 4 signals, r1's edges 8
    moe = b.component("moe")
    assert moe is not None and moe.active_params < moe.params
    tetra = b.component("TetraMemory")
    assert tetra is not None and tetra.instances == 2  # c3's and its shared use in c4
    # the shared region adds FLOPs and state but no parameters
    alone = breakdown(Genome.from_dict({**EVERYTHING, "edges": EVERYTHING["edges"][:4]}), seq_len=64)
    alone_tetra = alone.component("TetraMemory")
    assert alone_tetra is not None and alone_tetra.params == 2 * tetra.params
    assert alone_tetra.flops_per_token == tetra.flops_per_token


def test_sampled_genomes_sum_to_their_totals():
    for genome in sampled_genomes(12, seed=2):
        b = breakdown(genome, seq_len=64, batch=2)
        assert_sums_to_totals(b, genome, 64)
        assert sum(c.params for c in b.components) == decode(genome, "meta").num_params()


def test_per_block_view_of_a_stack_and_of_a_mixed_genome():
    gpt2 = breakdown(preset("gpt2-small"), seq_len=1024, batch=4).per_block()
    assert gpt2.blocks == 12 and [r[0] for r in gpt2.rows] == ["attention", "mlp"]
    # attention: 4 d² per token in projections, 4·T·d in scores and values, per layer
    d, t = 768, 1024
    assert gpt2.rows[0][2] == 4 * t * (2 * 4 * d * d + 4 * t * d)
    assert gpt2.flops_per_block == sum(r[2] for r in gpt2.rows)
    jamba = breakdown(preset("jamba"), seq_len=64).per_block()
    assert jamba.blocks is None and jamba.flops_per_block is None  # 28 Mamba, 4 attention layers


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="positive"):
        breakdown(preset("gpt2-small"), seq_len=0)


def test_dogma_byte_follows_the_chapter_layout_and_builds_with_the_breakdown_count():
    genome = preset("dogma-byte")
    cfg = model_config(genome)
    assert (cfg.d_model, cfg.vocab, cfg.tie_embeddings) == (512, 257, False)
    coding = [st for st in cfg.stages if isinstance(st, CodingStage)]
    block_kinds = [tuple(layer.block.kind for layer in st.layers) for st in coding]
    memory, expression = block_kinds[0], block_kinds[1]
    assert memory == ("tetra", "dna", "epigenetic")
    assert expression == ("strand_attention", "expression")
    assert block_kinds == [memory, expression] * 16
    regulatory = [st for st in cfg.stages if isinstance(st, RegulatoryStage)]
    assert len(regulatory) == 16 and all(len(r.gates) == len(r.routers) == 1 for r in regulatory)
    # the regulation of block i gates its strand attention and expression folder
    assert [st.gates for st in coding[1::2]] == [((f"r{i}", False),) for i in range(1, 17)]
    b = breakdown(genome, seq_len=512, batch=4)
    assert b.per_block().blocks == 16
    torch.manual_seed(0)
    model = decode(genome)  # on CPU, once: 16 blocks at width 512
    assert model.num_params() == sum(c.params for c in b.components) == b.totals.params


# -- the chapter's allocation study beside dogma-byte -----------------------------------------
CHAPTER_TEXT = Path("/work/shared/seeds/000_29a8c2cbfe8be2af.txt")


def test_the_transcribed_chapter_figures_add_up_as_printed():
    assert sum(r.value for r in ALLOCATION) == pytest.approx(224.56e6)  # printed: 224.7M
    assert sum(r.value for r in PER_BLOCK_FLOPS) == pytest.approx(PER_BLOCK_TOTAL.value)
    assert round(BLOCKS * PER_BLOCK_TOTAL.value / 1e9) == ALL_BLOCKS_TOTAL.value / 1e9  # 75.2 -> 75
    dna = next(r for r in PER_BLOCK_FLOPS if r.line == 357)
    assert round(dna.value / PER_BLOCK_TOTAL.value, 2) == DNA_SHARE[0]
    assert ALLOCATION[0].precision == 0.005e6 and PER_BLOCK_FLOPS[0].precision == 0.05e9


@pytest.mark.skipif(not CHAPTER_TEXT.exists(), reason="the chapter's text is not on this machine")
def test_every_transcribed_row_is_on_its_line_of_the_chapter():
    lines = CHAPTER_TEXT.read_text().splitlines()
    for row in (*ALLOCATION, ALLOCATION_TOTAL, *PER_BLOCK_FLOPS, PER_BLOCK_TOTAL, ALL_BLOCKS_TOTAL):
        text = lines[row.line - 1]
        assert text.startswith(row.component) and row.printed in text, (row, text)
    assert "45%" in lines[DNA_SHARE[1] - 1]


def test_dogma_byte_prints_as_the_chapter_but_for_tetramemory_and_says_why():
    genome = preset("dogma-byte")
    cfg = model_config(genome)
    rows = allocation(breakdown(genome, seq_len=512), cfg)
    differ = [r.component for r in rows if r.sentence]
    assert differ == ["TetraMemory", "Norms", "Total"]
    assert "(tetra)" in rows[1].sentence and "0.37x" in rows[1].sentence
    flops = per_block_flops(breakdown(genome, seq_len=512, batch=4), cfg)
    assert flops is not None and all(r.sentence for r in flops)  # every figure differs
    by_line = {r.line: r for r in flops}
    assert by_line[358].formula == 4 * 512 * 2 * 512**2  # the chapter's B x T x 2d^2
    assert by_line[362].ours == pytest.approx(16 * by_line[361].ours)
    assert per_block_flops(breakdown(genome, seq_len=512, batch=2), cfg) is None
    assert applies(genome) and not applies(preset("dogma"))
