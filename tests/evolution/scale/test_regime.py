"""Which regime a ladder is in, the epoch cap and the default sizes a text allows
(`evolution.scale.regime`): a fixed-data ladder is never called a scaling law, no size passes
over its text more than 4 times, and the default ladder on the English corpus stays within it."""

from __future__ import annotations

import contextlib
import io

import pytest

from dogma_evolve.evaluation.scaling import LadderError
from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.scale import train as scale
from dogma_evolve.evolution.scale.ladder import Design
from dogma_evolve.evolution.scale.regime import MAX_EPOCHS, classify, default_targets, default_top, epoch_cap
from dogma_evolve.genome import load_genome

PINNED = {"vocab": 257, "max_len": 64}


def design(name: str = "gpt2-small") -> Design:
    return Design.of(load_genome(f"preset:{name}"), PINNED, f"preset:{name}", preset=True)


def test_the_four_regimes():
    fixed = classify(None, 200_000, [0.1, 0.5], 6_000_000)
    assert fixed.name == "fixed-data" and not fixed.scaling_law
    assert "not a scaling law" in fixed.message and "200,000 tokens" in fixed.message
    optimal = classify(20.0, None, [0.2, 0.9], 6_000_000)
    assert optimal.name == "compute-optimal" and optimal.scaling_law and optimal.max_epochs == 0.9
    constrained = classify(20.0, None, [0.5, 2.5], 6_000_000)
    assert constrained.name == "data-constrained" and "2.50 times" in constrained.message
    assert classify(2.0, None, [0.1], 6_000_000).name == "proportional"
    assert classify(20.0, None, [None], None).name == "compute-optimal"  # a generated task: endless
    for r in (fixed, optimal, constrained):
        assert "\n" not in r.message


def test_the_epoch_cap_refuses_in_one_line_and_names_the_largest_size_the_text_allows():
    epoch_cap([(1000, 4 * 10_000, 4.0)], 10_000, [40.0])  # exactly 4 passes: allowed
    with pytest.raises(LadderError) as error:
        epoch_cap([(1000, 20_000, 2.0), (5000, 100_000, 10.0)], 10_000, [20.0])
    text = str(error.value)
    assert "more than 4 times" in text and "up to 10.0 at 5,000" in text
    assert "at most 2,000 parameters at 20 tokens/param" in text and "\n" not in text
    # bytelm's small smoke-test text (420k tokens) cannot carry 400k parameters at 20 each
    with pytest.raises(LadderError, match="memorisation"):
        scale.make_plan(design(), "both", "bytelm", [8e3, 2.5e4, 8e4, 4e5], [scale.Budget(per_param=20)], 2)
    with pytest.raises(LadderError, match="more than 4 times"):  # a fixed count too
        scale.make_plan(design(), "both", "bytelm", [8e3, 2.5e4, 8e4, 4e5], [scale.Budget(tokens=2e6)], 2)


def test_default_sizes_follow_the_text():
    text = 6_000_000
    assert default_top(3_000, text, 20.0) == 300_000  # one pass at 20 tokens per parameter
    assert default_top(20_000, text, 20.0) == pytest.approx(20_000 * 10**1.55)  # the least span
    assert default_top(300_000, text, 20.0) == 1_200_000  # capped at 4 passes
    assert default_top(3_000, 10**9, 20.0) == 500_000  # a large text: the CPU's half hour
    assert default_top(3_000, None, None) == pytest.approx(10_000 * 10**1.7)  # generated data
    targets = default_targets(3_312, 300_000)
    assert targets[0] == 3_312 and targets[-1] == pytest.approx(300_000) and len(targets) == 5


@pytest.mark.parametrize("name", ["gpt2-small", "llama3-8b", "mamba-130m", "rwkv4-169m"])
def test_the_default_ladder_on_the_english_corpus_is_a_scaling_law_within_the_cap(name):
    plan = scale.make_plan(design(name), "both", "bytelm_en", None, [scale.Budget(per_param=20)], 2)
    assert plan.regime is not None and plan.regime.scaling_law
    assert plan.regime.name in ("compute-optimal", "data-constrained")
    assert 0.5 < plan.regime.max_epochs <= MAX_EPOCHS
    assert all(p.epochs is not None and p.epochs <= MAX_EPOCHS for p in plan.points)
    assert plan.rungs[-1].params / plan.rungs[0].params >= 10**1.5


def test_the_smoke_corpus_is_too_small_for_a_default_ladder():
    with pytest.raises(LadderError, match="pass over the 419,645-token text 4 times"):
        scale.make_plan(design(), "both", "bytelm", None, [scale.Budget(per_param=20)], 2)


def test_the_command_refuses_an_over_repeated_ladder_before_creating_a_store(tmp_path):
    db = tmp_path / "never.db"
    err = io.StringIO()
    argv = ["scale", "preset:gpt2-small", "--task", "bytelm", "--sizes", "8k,25k,80k,400k"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*argv, "--store", f"sqlite:///{db}"])
    assert code == 2 and err.getvalue().count("\n") == 1 and "more than 4 times" in err.getvalue()
    assert not db.exists()
