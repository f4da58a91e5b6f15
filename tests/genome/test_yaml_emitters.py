"""The fast YAML emitter (libyaml) writes a genome's canonical text byte for byte as PyYAML's
own emitter does: a genome's id is the hash of that text, so one differing byte would give
every stored genome a new id (tests/genome/test_pinned_ids.py pins some ids; this covers the
variety a search makes and the scalars a plugin's parameters can hold)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome import Genome
from dogma_evolve.genome.core import CANONICAL_FORMAT
from dogma_evolve.genome.yaml_io import dump_yaml

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")


def _same(doc: dict) -> None:
    fast, python = dump_yaml(doc), dump_yaml(doc, emitter="python")
    assert fast == python


def test_the_emitters_agree_on_sampled_mutated_and_crossed_genomes():
    space = DogmaSpace({"vocab": 258, "max_len": 64}, 64, 10**6)
    rng = random.Random(3)
    pool = [space.sample(rng) for _ in range(150)]
    for _ in range(450):
        try:
            if rng.random() < 0.3:
                child = space.crossover(rng.choice(pool), rng.choice(pool), rng)
            else:
                child = space.mutate(rng.choice(pool), rng.choice(space.operators), rng)
        except Exception:  # noqa: BLE001 - a refused variation (Discard, a violation)
            continue
        pool.append(child.genome)
    assert len(pool) > 400
    for genome in pool:
        _same(genome.to_dict(CANONICAL_FORMAT))


def test_the_emitters_agree_on_the_shipped_genomes():
    files = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("benchmarks/genomes/*.yaml")])
    genomes = []
    for path in files:
        try:
            genomes.append(Genome.from_yaml(path.read_text()))
        except Exception:  # noqa: BLE001 - a config or a plugin's file, not a genome
            continue
    assert genomes
    for genome in genomes:
        _same(genome.to_dict(CANONICAL_FORMAT))


ODD = [1e-5, 1e300, -0.0, float("inf"), 0.1, 1 / 3, True, None, 2**70, -5, "", "yes", "no", "on",
       "1e3", "0x1F", "~", "null", "a: b", "-x", " lead", "trail ", "two\nlines", "é", '"q"', "'s'",
       "#c", "[x]", "{y}", "&a", "*b", "!t", "%p", "@x", "`x", "0777", "1_000", "+1", ".inf",
       "2026-01-01", "12:30", "x" * 1200]  # fmt: skip


@pytest.mark.parametrize("value", ODD, ids=repr)
def test_the_emitters_agree_on_odd_parameter_values(value):
    base = {"base": "A", "kind": "mlp", "params": {"x": value, "values": [value, value]}}
    _same({"dogma": 1, "regions": [{"id": "c1", "type": "coding", "bases": [base]}], "edges": []})
