"""The coupled-moves probe: its edits are the genomes it says, valid in the DOGMA space."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.two_moves import variants
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome.sequence import sequence_view
from dogma_evolve.genome.yaml_io import dump_yaml, load_yaml

GENOMES = Path(__file__).resolve().parents[2] / "benchmarks" / "genomes"


@pytest.mark.parametrize("name", ["plateau_seed0.yaml", "plateau_seed2.yaml"])
def test_the_edits_are_valid_and_change_only_what_they_name(name: str) -> None:
    space = DogmaSpace.from_config(RunConfig())
    doc = load_yaml((GENOMES / name).read_text())
    views = {k: sequence_view(space.parse(dump_yaml(v))) for k, v in variants(doc).items()}
    for k, v in variants(doc).items():
        assert space.violation(space.parse(dump_yaml(v))) is None, k
    original = views["as is"]
    assert "pos=learned" in original
    assert views["positions none"] == original.replace("pos=learned", "pos=none")
    head, rest = original.split("] ", 1)
    assert views["conv first"] == f"{head}] C[T:conv] {rest}"
    assert views["lstm first"] == f"{head}] C[T:lstm(hidden=96)] {rest}"
    none_head = head.replace("pos=learned", "pos=none")
    assert views["none + conv first"] == f"{none_head}] C[T:conv] {rest}"
    assert views["none + lstm first"] == f"{none_head}] C[T:lstm(hidden=96)] {rest}"
    assert doc == load_yaml((GENOMES / name).read_text())  # the edits copy, never change, the genome
