"""The statistics of a calibration on constructed data with known answers: the promotion's
top-k recall, the rank correlations over the panel, the quality distribution, the rows per
rung (by quality and by held-out loss) and their transfer rows, the ladder's defaults and
refusals, and the printed table (of a summary with and without the loss rankings)."""

from __future__ import annotations

from typing import Any

import pytest

from dogma_evolve.evolution.calibrate.defaults import default_rungs
from dogma_evolve.evolution.calibrate.panel import CalibrateError, make_ladder
from dogma_evolve.evolution.calibrate.stats import (
    compare,
    distribution,
    promotion_recall,
    promotion_size,
    rung_rows,
    scores,
    top_k,
    transfer_rows,
)
from dogma_evolve.evolution.calibrate.table import calibration_lines


def test_a_promotion_keeps_the_ceiling_of_its_share() -> None:
    assert [promotion_size(n, 0.25) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert promotion_size(3, 1.0) == 3


def test_top_k_breaks_ties_by_panel_order() -> None:
    assert top_k([0.1, 0.5, 0.5, 0.2], 2) == {1, 2}
    assert top_k([0.0, 0.0, 0.0], 1) == {0}


def test_recall_is_the_share_of_the_true_top_k_kept() -> None:
    higher = [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert promotion_recall(higher, higher, 0.25) == {"k": 2, "recall": 1.0, "chance": 0.25}
    reversed_ = list(reversed(higher))
    assert promotion_recall(reversed_, higher, 0.25)["recall"] == 0.0
    # the rung promotes members 0 and 2; the true top two are 0 and 1: one of two kept
    lower = [9.0, 0.0, 8.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert promotion_recall(lower, higher, 0.25)["recall"] == 0.5
    assert promotion_recall([], [], 0.25) == {"k": 0, "recall": None, "chance": None}
    with pytest.raises(ValueError):
        promotion_recall([1.0], [1.0, 2.0], 0.25)


def test_the_distribution_has_quartiles_and_the_shares_at_chance_and_under_the_floor() -> None:
    d = distribution([0.5, -0.1, 0.02, 0.0, 0.1], floor=0.05)
    assert (d["n"], d["min"], d["q1"], d["median"], d["q3"], d["max"]) == (5, -0.1, 0.0, 0.02, 0.1, 0.5)
    assert d["chance"] == pytest.approx(2 / 5) and d["floor"] == pytest.approx(3 / 5)
    assert distribution([0.3], None)["floor"] is None
    assert distribution([], 0.05) == {
        "n": 0,
        **dict.fromkeys(("min", "q1", "median", "q3", "max", "chance", "floor")),
    }


def test_compare_correlates_the_members_measured_at_both() -> None:
    # ρ = 1 − 6·Σd²/(n(n²−1)) = 1 − 12/60 = 0.8; τ = (5 − 1)/6 (one discordant pair of six)
    c = compare([1.0, 2.0, 3.0, 4.0, None], [1.0, 3.0, 2.0, 4.0, 9.0], 0.25, resamples=200)
    assert c["n"] == 4 and c["spearman"] == pytest.approx(0.8) and c["kendall"] == pytest.approx(2 / 3)
    assert c["spearman_low"] is None  # no interval below six members
    assert (c["k"], c["recall"], c["weak"]) == (1, 1.0, False)
    monotone = compare([float(i) for i in range(8)], [float(i * i) for i in range(8)], 0.5, resamples=200)
    assert monotone["spearman"] == pytest.approx(1.0) and monotone["kendall"] == pytest.approx(1.0)
    assert monotone["spearman_low"] == pytest.approx(1.0) and monotone["kendall_high"] == pytest.approx(1.0)
    anti = compare([float(i) for i in range(8)], [float(-i) for i in range(8)], 0.25, resamples=200)
    assert anti["spearman"] == pytest.approx(-1.0) and anti["weak"] and anti["recall"] == 0.0


def _qualities() -> dict[int, list[float | None]]:
    return {
        5: [0.0, 0.0, 0.0, 0.0, -0.1, 0.1],
        10: [0.1, 0.2, 0.3, 0.4, None, 0.6],
        20: [0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
    }


def test_rows_compare_each_rung_with_the_full_fidelity_and_the_target() -> None:
    ladder = make_ladder(10, (5,), 20)
    rows = rung_rows(_qualities(), ladder, 0.25, 0.05, resamples=200)
    assert [r["steps"] for r in rows] == [5, 10, 20]
    assert rows[1]["vs_full"] is None and rows[2]["vs_full"] is None and rows[2]["vs_target"] is None
    assert rows[1]["failed"] == 1 and rows[1]["missing"] == 0 and rows[1]["quality"]["n"] == 5
    pending = rung_rows(_qualities(), ladder, 0.25, 0.05, resamples=200, missing={10: 1})
    assert (pending[1]["failed"], pending[1]["missing"], pending[0]["missing"]) == (0, 1, 0)
    assert rows[1]["vs_target"]["spearman"] == pytest.approx(1.0) and rows[1]["vs_target"]["n"] == 5
    assert rows[0]["vs_target"]["n"] == 6 and rows[0]["vs_full"]["n"] == 5
    assert rows[0]["quality"]["chance"] == pytest.approx(5 / 6)
    # the rung promotes member 5 (its only quality above 0) and member 0 (first of the ties at 0);
    # the true top two are members 5 and 4: one of two kept
    assert rows[0]["vs_target"]["recall"] == 0.5 and rows[0]["vs_target"]["k"] == 2
    names = [(t.lower_fidelity, t.higher_fidelity, t.n) for t in transfer_rows(rows, ladder)]
    assert names == [("rung@5", "full@10", 5), ("rung@5", "target@20", 6), ("rung@10", "target@20", 5)]


def _losses() -> dict[int, list[float | None]]:
    """Losses at the rung 5 whose order disagrees with the rung's quality (ascending there):
    −loss ranks the members 1, 2, 3, 6, 5, 4 where the qualities at 10 and 20 rank them 1…6."""
    return {5: [6.0, 5.0, 4.0, 1.0, 2.0, 3.0], 10: [0.5] * 6, 20: [0.4] * 6}


def test_a_rung_ranked_by_held_out_loss_is_ranked_by_minus_loss() -> None:
    assert scores([2.0, None, 0.5]) == [-2.0, None, -0.5]
    ladder = make_ladder(10, (5,), 20)
    qualities: dict[int, list[float | None]] = {
        5: [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # the reverse of the truth
        10: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        20: [0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
    }
    rows = rung_rows(qualities, ladder, 0.25, None, resamples=200, losses=_losses())
    five = rows[0]
    for key in ("vs_full", "vs_target"):
        assert (
            five[key]["spearman"] == pytest.approx(-1.0) and five[key]["recall"] == 0.0 and five[key]["weak"]
        )
    # ρ = 1 − 6·Σd²/(n(n²−1)) = 1 − 6·8/210; the loss promotes members 3 and 4, the truth 4 and 5
    for key in ("loss_vs_full", "loss_vs_target"):
        c = five[key]
        assert c["n"] == 6 and c["spearman"] == pytest.approx(1 - 48 / 210)
        assert (c["k"], c["recall"], c["weak"]) == (2, 0.5, False) and c["spearman_low"] is not None
    # at and above the full fidelity, and without losses, there is no loss ranking
    assert all(r["loss_vs_full"] is None and r["loss_vs_target"] is None for r in rows[1:])
    plain = rung_rows(qualities, ladder, 0.25, None, resamples=200)
    assert all(r["loss_vs_full"] is None and r["loss_vs_target"] is None for r in plain)
    # a member without a loss leaves the loss ranking only
    missing = _losses() | {5: [6.0, 5.0, 4.0, 1.0, None, 3.0]}
    partial = rung_rows(qualities, ladder, 0.25, None, resamples=200, losses=missing)[0]
    assert partial["loss_vs_target"]["n"] == 5 and partial["vs_target"]["n"] == 6
    names = [(t.lower_fidelity, t.higher_fidelity, t.ranked_by) for t in transfer_rows(rows, ladder)]
    assert names == [
        ("rung@5", "full@10", "quality"),
        ("rung@5", "target@20", "quality"),
        ("loss@5", "full@10", "loss"),
        ("loss@5", "target@20", "loss"),
        ("rung@10", "target@20", "quality"),
    ]
    loss_rows = [t for t in transfer_rows(rows, ladder) if t.lower_fidelity == "loss@5"]
    assert loss_rows[1].spearman == five["loss_vs_target"]["spearman"] and loss_rows[1].n == 6


def test_the_ladder_holds_the_full_fidelity_and_refuses_a_low_target() -> None:
    assert default_rungs(300) == (50, 150, 300) and default_rungs(100) == (50, 100)
    assert default_rungs(1) == (1,)
    ladder = make_ladder(300, (150, 60, 60), 3000)
    assert ladder.rungs == (60, 150, 300) and ladder.fidelities == (60, 150, 300, 3000)
    for steps, rungs, target, words in (
        (0, (), 10, "--steps 0"),
        (10, (0,), 20, "--rungs: 0"),
        (10, (5,), 10, "--target 10"),
        (10, (50,), 40, "--target 40: above every rung (50)"),
    ):
        with pytest.raises(CalibrateError, match=words.replace("(", r"\(").replace(")", r"\)")):
            make_ladder(steps, rungs, target)


def _document(rows: list[dict[str, Any]], task: str = "mqar") -> dict[str, Any]:
    return {
        "run_id": "abc",
        "steps": 10,
        "target": 20,
        "promote": 0.25,
        "floor": 0.05,
        "presets": 2,
        "seed": 0,
        "panel": [{}] * 6,
        "rows": rows,
        "missing": 1,
        "task": task,
    }


def test_the_table_shows_every_rung_and_warns_of_a_weak_one() -> None:
    ladder = make_ladder(10, (5,), 20)
    rows = rung_rows(_qualities(), ladder, 0.25, 0.05, resamples=200)
    lines = calibration_lines(_document(rows))
    text = "\n".join(lines)
    assert "6 genomes (2 presets, 4 random" in lines[0] and "k = 2 of the panel" in lines[0]
    ranking = [line for line in lines if line.lstrip().startswith(("5 ", "10 "))]
    assert ranking[0].split()[:4] == ["5", "quality", "5", f"{rows[0]['vs_full']['spearman']:+.2f}"]
    assert ranking[0].split()[7:9] == ["6", f"{rows[0]['vs_target']['spearman']:+.2f}"]
    assert "1.00 (0.40)" in ranking[1]  # rung 10 against the target: recall 1 of k = 2 over n = 5
    assert "    20*   6      0" in text and "83%" in text  # the target's row; ≤ chance at 5 steps
    assert ("warning: at 5 steps" in text) == rows[0]["vs_target"]["weak"]
    assert "1 trainings not stored yet" in text


def _loss_lines(lines: list[str]) -> int:
    return sum(line.split()[:2] == ["held-out", "loss"] for line in lines)


def test_the_table_shows_the_held_out_loss_ranking_under_each_rung_below_the_full_fidelity() -> None:
    ladder = make_ladder(10, (5,), 20)
    # the loss rises with the target's quality: its ranking is the reverse of the truth
    losses: dict[int, list[float | None]] = {5: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 10: [1.0] * 6, 20: [1.0] * 6}
    rows = rung_rows(_qualities(), ladder, 0.25, 0.05, resamples=200, losses=losses)
    assert rows[0]["loss_vs_target"]["spearman"] == pytest.approx(-1.0)
    lines = calibration_lines(_document(rows))
    text = "\n".join(lines)
    head = next(i for i, line in enumerate(lines) if "ranked by" in line)
    assert lines[head + 1].split()[:2] == ["5", "quality"]
    loss = lines[head + 2].split()
    assert loss[:4] == ["held-out", "loss", "5", "-1.00"]  # against the full fidelity: n = 5
    assert loss[7:9] == ["6", "-1.00"] and "0.00 (0.33)" in lines[head + 2]
    assert lines[head + 3].split()[:2] == ["10", "quality"] and _loss_lines(lines) == 1
    assert "held-out loss: the rung's loss, lowest first" in text
    assert "at 5 steps the panel's ranking by held-out loss barely predicts the target's (ρ -1.00" in text
    # an old summary, written before the loss rankings: the same table without their lines
    old = [{k: v for k, v in r.items() if not k.startswith("loss_")} for r in rows]
    old_lines = calibration_lines(_document(old))
    assert "held-out" not in "\n".join(old_lines)
    assert old_lines == [line for line in lines if "held-out loss" not in line]
    # several tasks: no loss ranking, and the table says why
    several = rung_rows(_qualities(), ladder, 0.25, 0.05, resamples=200)
    lines = calibration_lines(_document(several, task="mqar,copying"))
    assert "no held-out loss ranking: with several tasks" in "\n".join(lines) and _loss_lines(lines) == 0
