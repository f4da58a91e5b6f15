"""`benchmarks/scaling.py --sizes`: one list for every design, or NAME=SIZES for one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import scaling  # noqa: E402


def test_a_named_list_wins_for_its_design_and_an_unnamed_one_for_the_rest() -> None:
    specs = [scaling.size_spec("10k,100k"), scaling.size_spec("llama=4k,40k,400k")]
    assert specs == [(None, [10_000.0, 100_000.0]), ("llama", [4_000.0, 40_000.0, 400_000.0])]
    assert scaling.sizes_for("llama", specs) == [4_000.0, 40_000.0, 400_000.0]
    assert scaling.sizes_for("mamba", specs) == [10_000.0, 100_000.0]
    assert scaling.sizes_for("mamba", specs[1:]) is None  # its compact ladder
    assert scaling.sizes_for("llama", None) is None


def test_an_unknown_design_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="unknown design 'gpt'"):
        scaling.size_spec("gpt=1k,10k")


def test_the_estimate_gives_each_design_its_own_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--estimate", "--json", "--only", "llama,mamba", "--sizes", "llama=3.7k,15k,33k,60k,119k,250k"]
    assert scaling.main(argv) == 0
    designs = json.loads(capsys.readouterr().out)["designs"]
    assert len(designs["llama"]["sizes"]) == 6
    assert designs["mamba"]["sizes"] == [3_392, 9_984, 39_504, 146_720]  # its compact ladder
