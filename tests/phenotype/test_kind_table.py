"""The kind → file table of docs/reference/blocks.md is the registries' own: every built-in
kind, its gene module and its block's module, in `BUILT_IN`'s order."""

from __future__ import annotations

import re
from pathlib import Path

from dogma_evolve.genome.kinds import BUILT_IN
from dogma_evolve.phenotype.registry import REGISTRY

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "blocks.md"
ROW = re.compile(r"^\| `(\w+)` \| `genome/kinds/(\w+)\.py` \| `phenotype/blocks/(\w+)\.py` \|$")


def test_the_docs_kind_table_names_each_kinds_gene_and_block_file() -> None:
    rows = [m.groups() for line in PAGE.read_text().splitlines() if (m := ROW.match(line))]
    actual = [(k, k, REGISTRY[k].config.__module__.rsplit(".", 1)[-1]) for k in BUILT_IN]
    assert rows == actual
    root = PAGE.parents[2]
    for _kind, gene, block in rows:
        assert (root / "genome" / "kinds" / f"{gene}.py").is_file()
        assert (root / "phenotype" / "blocks" / f"{block}.py").is_file()
