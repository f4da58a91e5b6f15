"""`benchmarks/scaling.py --sizes`: one list for every design, or NAME=SIZES for one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
    def estimate(*argv: str) -> dict[str, Any]:
        assert scaling.main(["--estimate", "--json", "--only", "llama,mamba", *argv]) == 0
        return dict(json.loads(capsys.readouterr().out)["designs"])

    compact = estimate()
    own = estimate("--sizes", "llama=3.7k,15k,33k,60k,119k,250k")
    assert len(own["llama"]["sizes"]) == 6 and len(compact["llama"]["sizes"]) == 4
    assert own["mamba"]["sizes"] == compact["mamba"]["sizes"]  # its compact ladder, untouched
