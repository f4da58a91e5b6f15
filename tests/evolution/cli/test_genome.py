"""`evolve genome show --breakdown`: the per-component table as text and JSON (summing to the
accounting), the dogma-byte preset beside the chapter, and bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dogma_evolve.genome import Genome, preset
from dogma_evolve.phenotype import account, decode
from tests.in_process import evolve_in_process as cli

SMALL = """\
dogma: 1
regions:
- id: s0
  type: structural
  settings: {d_model: 32, vocab: 61, max_len: 64}
- id: r1
  type: regulatory
  bases: [{base: C, kind: gate, params: {hidden: 8}}]
- id: p2
  type: promoter
  settings: {copies: 3}
- id: c2
  type: coding
  bases:
  - {base: T, kind: attention, params: {heads: 4}}
  - {base: A, kind: swiglu, params: {}}
edges:
- {source: r1, target: c2, kind: activates}
"""


@pytest.fixture
def small(tmp_path: Path) -> str:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return str(path)


def test_breakdown_json_sums_to_the_accounting_and_the_built_module(small):
    code, out, err = cli("genome", "show", small, "--breakdown", "--json", "--seq-len", "64", "--batch", "2")
    assert code == 0, err
    data = json.loads(out)
    genome = Genome.from_yaml(Path(small).read_text())
    acct = account(genome, 64)
    components = data["components"]
    assert [c["component"] for c in components] == [
        "Token embedding",
        "Regulation gate",
        "attention",
        "swiglu",
        "Norms",
        "Regulation edges",
        "Output head",
    ]
    for key in ("params", "flops_per_token", "state_bytes_per_token", "state_bytes_fixed"):
        assert sum(c[key] for c in components) == getattr(acct, key) == data["totals"][key]
    assert sum(c["params"] for c in components) == decode(genome).num_params()
    assert sum(c["state_bytes"] for c in components) == data["totals"]["state_bytes"] > 0
    per_block = data["per_block"]
    # one gate for the three copies: the components do not repeat as one block
    assert (per_block["batch"], per_block["seq_len"], per_block["blocks"]) == (2, 64, None)
    assert per_block["flops_forward"] == acct.flops_per_token * 2 * 64
    assert "chapter" not in data and data["genome_id"] == genome.id


def test_breakdown_text_lists_components_and_blocks(small):
    code, out, err = cli("genome", "show", small, "--breakdown", "--seq-len", "64")
    assert code == 0, err
    acct = account(Genome.from_yaml(SMALL), 64)
    assert "by component, at seq_len 64" in out
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert f"{acct.params:,}" in total and f"{acct.flops_per_token:,}" in total
    assert "one forward pass of B=4 x T=64 tokens" in out  # --batch defaults to 4
    assert "per block: none" in out
    assert "beside the chapter" not in out
    code, out, err = cli("genome", "show", "preset:gpt2-small", "--breakdown", "--seq-len", "1024")
    d, t = 768, 1024  # a layer: 8d² (attention projections) + 16d² (MLP) + 4·T·d per token
    assert code == 0 and f"per block (12 blocks): {4 * t * (24 * d * d + 4 * t * d) / 1e9:.3g}B" in out


def test_plain_show_is_unchanged_by_the_new_options(small):
    code, out, err = cli("genome", "show", small, "--json", "--seq-len", "64")
    assert code == 0, err
    data = json.loads(out)
    assert "components" not in data and data["params"] == account(Genome.from_yaml(SMALL), 64).params


def test_dogma_byte_prints_the_chapter_beside_ours():
    code, out, err = cli("genome", "show", "preset:dogma-byte", "--breakdown", "--seq-len", "512")
    assert code == 0, err
    assert "parameters, Table 15.2" in out and "FLOPs per block at (B=4, T=512)" in out
    table = out[out.index("parameters, Table 15.2") : out.index("FLOPs per block at")]
    rows = {line.split()[0]: line for line in table.splitlines() if line[:1].isalpha()}
    assert "224.7M" in rows["Total"] and "33.8M" in rows["TetraMemory"]
    # a sentence below each table for every row that differs
    assert "  TetraMemory: ours 12.59M" in out and "  16 blocks: ours" in out
    assert "DNA Computing (4 paths):" not in out  # 88.3M both: no sentence


def test_dogma_byte_json_carries_the_chapter_and_its_flops_only_at_its_shape():
    code, out, _ = cli("genome", "show", "preset:dogma-byte", "--breakdown", "--json", "--seq-len", "512")
    chapter = json.loads(out)["chapter"]
    assert code == 0 and [r["line"] for r in chapter["allocation"][:3]] == [331, 332, 333]
    assert chapter["per_block_flops"][0]["line"] == 356
    code, out, _ = cli("genome", "show", "preset:dogma-byte", "--breakdown", "--json", "--seq-len", "1024")
    chapter = json.loads(out)["chapter"]
    assert code == 0 and chapter["per_block_flops"] is None
    assert "--batch 4 --seq-len 512" in chapter["per_block_flops_note"]
    assert chapter["allocation"][-1]["ours"] == account(preset("dogma-byte")).params


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--seq-len", "0"), ("--seq-len", "at least 1")),
        (("--batch", "-2"), ("--batch", "-2")),
        (("--format", "yaml"), ("choose one",)),
    ],
)
def test_bad_options_are_one_line_errors(small, argv, words):
    code, out, err = cli("genome", "show", small, "--breakdown", *argv)
    assert code == 2 and out == ""
    assert err.startswith("evolve: error: ") and err.count("\n") == 1
    for word in words:
        assert word in err


@pytest.mark.parametrize(
    ("source", "word"), [("preset:nonesuch", "unknown preset"), ("/nonexistent/genome.yaml", "cannot read")]
)
def test_bad_sources_are_one_line_errors(source, word):
    code, out, err = cli("genome", "show", source, "--breakdown")
    assert code == 2 and out == "" and err.count("\n") == 1 and word in err
