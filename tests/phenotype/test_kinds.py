"""One place per block kind: a kind's gene is its `KindSpec`, its block a config class that
names the kind; nothing else is edited to add one.

The toy kind below lives entirely in this module (spec, config, module): registering it is
enough to validate, decode, run and account genomes that use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.genome import KINDS, Genome, GenomeError, KindSpec, register_kind
from dogma_evolve.genome.kinds import BUILT_IN
from dogma_evolve.genome.schema import MAX_WIDTH, integer
from dogma_evolve.phenotype import REGISTRY, account, decode
from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params
from tests.phenotype.phenotype_helpers import genome_doc


def _derive_toy(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    p["width"] = p["width"] or s["d_model"]
    if p["width"] % 2:
        raise ValueError(f"width must be even, got {p['width']}")
    return p


def _define_toy_kind() -> type[BlockConfig]:
    """A lagged MLP, y_t = gelu((x_t + x_{t-lag}) W_in) W_out: gene, config and module."""
    register_kind(
        KindSpec(
            "toy_lag",
            ("T",),
            {"width": integer(0, 0, MAX_WIDTH, "0 = d_model"), "lag": integer(1, 1, 8)},
            doc="a lagged MLP (test kind)",
            derive=_derive_toy,
        )
    )

    @dataclasses.dataclass(frozen=True)
    class ToyLagConfig(BlockConfig, kind="toy_lag", role="sequence"):
        width: int
        lag: int

        def build(self) -> ToyLag:
            return ToyLag(self)

        def num_params(self) -> int:
            return linear_params(self.d_model, self.width, self.bias) + linear_params(
                self.width, self.d_model, self.bias
            )

        def flops_per_token(self, seq_len: int) -> int:
            return 4 * self.d_model * self.width

        def state_fixed(self) -> int:
            return self.lag * self.d_model

    class ToyLag(Mixer[ToyLagConfig]):
        def __init__(self, cfg: ToyLagConfig):
            super().__init__()
            self.cfg = cfg
            self.w_in = nn.Linear(cfg.d_model, cfg.width, bias=cfg.bias)
            self.w_out = nn.Linear(cfg.width, cfg.d_model, bias=cfg.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            lagged = F.pad(x, (0, 0, self.cfg.lag, 0))[:, : x.shape[1]]
            return self.w_out(F.gelu(self.w_in(x + lagged)))

        def init_state(self, batch: int) -> torch.Tensor:
            return self.w_in.weight.new_zeros(batch, self.cfg.lag, self.cfg.d_model)

        def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.w_out(F.gelu(self.w_in(x_t + state[:, 0])))
            return y, torch.cat([state[:, 1:], x_t[:, None]], 1)

        def state_size(self, seq_len: int) -> int:
            return self.cfg.state_fixed()

    return ToyLagConfig


@pytest.fixture
def toy_kind() -> Iterator[type[BlockConfig]]:
    try:
        yield _define_toy_kind()
    finally:
        KINDS.pop("toy_lag", None)
        REGISTRY.pop("toy_lag", None)


def test_a_kind_defined_in_one_module_validates_decodes_and_accounts(toy_kind):
    doc = genome_doc(
        [{"base": "T", "kind": "toy_lag", "params": {"lag": 2}}, {"base": "A", "kind": "swiglu"}],
        d_model=16,
        copies=2,
    )
    genome = Genome.from_dict(doc)
    assert genome.regions[-1].bases[0].gene.get("width") == 16  # derived by the spec
    doc["regions"][-1]["bases"][0]["params"]["width"] = 16
    assert Genome.from_dict(doc).id == genome.id
    assert "T:toy_lag(lag=2,width=16)" in genome.sequence_view()
    doc["regions"][-1]["bases"][0]["params"]["width"] = 5
    with pytest.raises(GenomeError, match="toy_lag: width must be even"):
        Genome.from_dict(doc)
    with pytest.raises(GenomeError, match="not allowed on a A base"):
        Genome.from_dict(genome_doc([{"base": "A", "kind": "toy_lag"}]))

    torch.manual_seed(0)
    model = decode(genome).double().eval()
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        logits = model(ids)
    state, steps = model.init_state(2), []
    for t in range(ids.shape[1]):
        out, state = model.step(ids[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-9, atol=1e-9)
    acct = account(genome, seq_len=9)
    assert acct.params == model.num_params()
    assert acct.state_bytes_fixed == 2 * model.state_size(9)

    cfg = toy_kind.of(24, lag=3)
    assert (cfg.d_model, cfg.width, cfg.lag) == (24, 24, 3)


def test_a_block_needs_its_gene_kind_registered_first():
    with pytest.raises(ValueError, match="unknown gene kind 'nowhere'"):

        @dataclasses.dataclass(frozen=True)
        class Orphan(BlockConfig, kind="nowhere", role="sequence"):
            pass

    assert "nowhere" not in REGISTRY


def test_every_kind_has_one_block_and_the_catalogue_keeps_its_order():
    assert set(REGISTRY) == set(KINDS)
    assert list(KINDS)[: len(BUILT_IN)] == list(BUILT_IN)  # seeded searches draw in this order
    for kind, block in REGISTRY.items():
        assert block.config.kind == kind and block.schema is KINDS[kind]
        assert (block.role == "regulatory") == (block.schema.regions == ("regulatory",)), kind


@pytest.mark.parametrize("kind", sorted(BUILT_IN))
def test_block_fields_are_the_spec_params_without_defaults_of_their_own(kind):
    """The spec holds every default: a config's gene fields have none (no second set)."""
    fields = {f.name: f for f in dataclasses.fields(REGISTRY[kind].config)}
    params = set(KINDS[kind].params) - {"global_every"}  # sets attention's window per layer
    assert params <= set(fields), kind
    for name in params:
        assert fields[name].default is dataclasses.MISSING, f"{kind}.{name} has a default"
        assert fields[name].default_factory is dataclasses.MISSING, f"{kind}.{name} has a default"
