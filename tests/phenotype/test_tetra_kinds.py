"""The two TetraMemory kinds as genomes decode them (genome format 2, `genome.formats`):
`kind: tetra` is the chapter's volumetric mesh, whose last token hears the first at any
context up to max_len; `kind: tetra_reach` is the fixed-reach one, which format-1
documents call `tetra` and still decode to, weights and all."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import decode, model_config
from dogma_evolve.phenotype.blocks.memory import TetraReachConfig
from dogma_evolve.phenotype.blocks.tetra_mesh import TetraMeshConfig
from dogma_evolve.phenotype.config import CodingStage
from tests.genome.test_formats import FIXED_REACH, STORED_YAML


def tetra_yaml(kind: str, max_len: int) -> str:
    """A one-gene format-2 document: `kind` alone between the embedding and the head."""
    return f"""\
dogma: 2
regions:
- id: s0
  type: structural
  settings: {{d_model: 16, vocab: 32, max_len: {max_len}, positions: none}}
- id: c1
  type: coding
  bases:
  - {{base: A, kind: {kind}}}
"""


def heard_by_the_last_token(genome: Genome, length: int) -> torch.Tensor:
    """heard[s]: whether the last output's logits have a non-zero gradient with respect to
    the embedding of token s (B = 1, T = `length`, float64)."""
    torch.manual_seed(0)
    model = decode(genome).double()
    embedded: list[torch.Tensor] = []
    model.embed.register_forward_hook(lambda module, args, out: embedded.append(out))
    ids = torch.randint(0, 32, (1, length))
    (grad,) = torch.autograd.grad(model(ids)[0, -1].sum(), embedded[0])
    return grad[0].abs().sum(-1) > 0


def first_block(genome: Genome):
    stage = model_config(genome).stages[0]
    assert isinstance(stage, CodingStage)
    return stage.layers[0].block


@pytest.mark.parametrize("length", [64, 512, 2048])
def test_a_tetra_genomes_last_token_depends_on_its_first(length):
    genome = Genome.from_yaml(tetra_yaml("tetra", length))
    block = first_block(genome)
    assert isinstance(block, TetraMeshConfig) and block.rounds == {64: 2, 512: 4, 2048: 7}[length]
    heard = heard_by_the_last_token(genome, length)
    assert heard[0], f"T={length}: the last token does not hear the first"
    assert heard.all(), f"T={length}: {int((~heard).sum())} earlier tokens unheard"


def test_the_fixed_reach_kind_does_not_hear_past_its_reach():
    genome = Genome.from_yaml(tetra_yaml("tetra_reach", 512))
    block = first_block(genome)
    assert isinstance(block, TetraReachConfig) and block.rounds * max(block.offsets) == 32
    heard = heard_by_the_last_token(genome, 512).flip(0)  # heard[s]: the token s back
    sums = {a + b for a in block.offsets for b in block.offsets}  # 2 rounds: 2 bonds at most
    assert [s for s in range(512) if heard[s]] == sorted(sums) and max(sums) == 32


def test_a_stored_format_1_tetra_decodes_to_the_fixed_reach_model():
    old, new = Genome.from_yaml(STORED_YAML), Genome.from_dict(_spelled_tetra_reach())
    assert old == new
    stage = model_config(old).stage("c0")
    assert isinstance(stage, CodingStage)
    block = stage.layers[0].block
    assert block == TetraReachConfig(d_model=32, bias=False, **FIXED_REACH)
    torch.manual_seed(0)
    old_state = decode(old).state_dict()
    torch.manual_seed(0)
    new_state = decode(new).state_dict()
    assert old_state.keys() == new_state.keys()
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    tetra = {k: tuple(v.shape) for k, v in old_state.items() if k.startswith("stages.c0.0.mixer.")}
    assert tetra == {
        **{f"stages.c0.0.mixer.{p}_proj.weight": (32, 32) for p in "qkvo"},
        "stages.c0.0.mixer.bond": (2, 5),  # 2 rounds x offsets 0, 1, 2, 4, 16
    }


def _spelled_tetra_reach() -> dict:
    """STORED_YAML written in format 2: the same genome."""
    doc = Genome.from_yaml(STORED_YAML).to_dict()
    assert doc["dogma"] == 2 and doc["regions"][3]["bases"][0]["kind"] == "tetra_reach"
    return doc
