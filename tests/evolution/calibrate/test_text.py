"""`evolve calibrate --against TASK`: the panel ranked against held-out English-text loss after
compute-optimal training, at the search's size and grown by the ladder's rule.

End to end on a tiny panel (real in-process trainings on mqar and bytelm_en): the cost line
before any training, a killed calibration resumes without retraining, the stored transfer
rows (each fidelity against `text@1x`, `text@2x`, per family), `report` (table, JSON, HTML)
reading the same summary back; the growth rule, the epoch cap, the stratified panel, the best
of a stored run joining the panel, and the statistics on hand-settled values."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from scipy import stats

from dogma_evolve.evolution.calibrate.calibration import make_plan, stored_summary, summary
from dogma_evolve.evolution.calibrate.panel import family_of, make_panel
from dogma_evolve.evolution.calibrate.table import calibration_lines
from dogma_evolve.evolution.calibrate.text import (
    grow,
    grow_panel,
    make_target,
    non_embedding,
    size_residuals,
    text_rows,
)
from dogma_evolve.evolution.cli import calibrate as calibrate_cli
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.store import Store
from tests.evolution.calibrate.test_command import TINY, count, evolve
from tests.evolution.stopping_pools import Pools

AGAINST = ["--against", "bytelm_en", "--sizes", "1,2", "--tokens-per-param", "1"]
POINTS = 4 * 3 + 4 * 2  # members × fidelities (5, 10, 20), and × sizes on the text
FIXTURE = Path(__file__).parents[2] / "store" / "fixtures" / "release_0_1.db"


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Pools:
    fake = Pools()
    monkeypatch.setattr(calibrate_cli, "_pool", fake)
    return fake


def space(task: str = "mqar", max_params: int = 100_000) -> DogmaSpace:
    return DogmaSpace.from_config(RunConfig(task=task, steps=10, max_params=max_params))


def test_a_calibration_against_text_prices_resumes_stores_and_reports(tmp_path: Path, pools: Pools) -> None:
    db = tmp_path / "t.db"
    url = f"sqlite:///{db}"
    pools.stop_after = 3  # killed after three trainings (the text's, the longest, go first)
    code, _, err = evolve("calibrate", *TINY, *AGAINST, "--store", url)
    assert code == 130 and count(db, "evaluations") == 3
    lines = err.splitlines()
    cost = next(i for i, line in enumerate(lines) if line.startswith("cost of the 20 trainings to do:"))
    assert cost < next(i for i, line in enumerate(lines) if "[1/20]" in line)
    assert "of it the language target" in lines[cost]
    pools.stop_after = None
    code, out, err = evolve("calibrate", *TINY, *AGAINST, "--json", "--store", url)
    assert code == 0, err
    data = json.loads(out)
    assert data["trained"] == POINTS - 3 and "(resumed)" in err and count(db, "evaluations") == POINTS
    text = data["text"]
    assert (text["task"], text["sizes"], text["tokens_per_param"]) == ("bytelm_en", [1.0, 2.0], 1.0)
    assert [r["label"] for r in text["rows"]] == ["1x", "2x"] and all(r["over"] == 0 for r in text["rows"])
    for row in text["rows"]:
        assert [e["steps"] for e in row["by_fidelity"]] == [5, 10, 20]
        assert all(e["quality"]["n"] == 4 for e in row["by_fidelity"])
        assert all(e["loss"]["n"] == 4 for e in row["by_fidelity"])  # one task: its loss ranks too
        assert sum(f["n"] for f in row["families"]) == 4
    for m in data["panel"]:
        assert m["family"] and all(isinstance(m["text"][k], float) for k in ("1x", "2x"))
    # the grown members are bigger, and their text trainings longer
    with Store(url, create=False) as store:
        run = store.get_run(data["run_id"])
        assert run is not None
        for entry in run.config["panel"]:
            one, two = entry["text"]["1x"], entry["text"]["2x"]
            assert two["params"] > one["params"]  # the 1x member is re-pinned to the text's vocabulary
            assert two["steps"] >= one["steps"]
        transfer = {(t.lower_fidelity, t.higher_fidelity): t for t in store.transfer(data["run_id"])}
        assert ("rung@10", "text@1x") in transfer and ("loss@5", "text@2x") in transfer
        assert (
            transfer[("rung@10", "text@2x")].spearman
            == text["rows"][1]["by_fidelity"][1]["quality"]["spearman"]
        )
        assert any(h.startswith("text@1x/") for _, h in transfer)
        stored = stored_summary(store, data["run_id"])
    assert stored is not None and stored["text"] == text and stored["panel"] == data["panel"]
    rows_before = count(db, "transfer")
    code, out, err = evolve("calibrate", *TINY, *AGAINST, "--store", url)
    assert (
        code == 0 and f"{POINTS} of {POINTS} trainings stored" in err and count(db, "transfer") == rows_before
    )
    assert "against bytelm_en at 1 tokens per non-embedding parameter" in out
    code, out, _ = evolve("report", "--run", data["run_id"], "--store", url)
    assert code == 0 and out.splitlines() == calibration_lines(stored)
    page = tmp_path / "c.html"
    code, out, err = evolve("report", "--run", data["run_id"], "--html", str(page), "--store", url)
    assert code == 0, err
    html = page.read_text()
    assert '<meta name="dogma-figures" content="2">' in html and "against bytelm_en at 2x" in html
    # a cap at the largest 1x member: the 2x members above it are left out, nothing is retrained
    cap = max(e["text"]["1x"]["params"] for e in run.config["panel"])
    above = sum(e["text"]["2x"]["params"] > cap for e in run.config["panel"])
    capped = ["--against-max-params", str(cap)]
    code, out, err = evolve("calibrate", *TINY, *AGAINST, *capped, "--json", "--store", url)
    assert code == 0, err
    again = json.loads(out)
    one, two = again["text"]["rows"]
    assert again["trained"] == 0 and again["run_id"] != data["run_id"] and again["text"]["max_params"] == cap
    assert (one["capped"], two["capped"], two["over"]) == (0, above, 0) and 0 < above
    assert two["by_fidelity"][2]["quality"]["n"] == 4 - above
    assert two["same_members"]["first_size"]["n"] == 4 - above
    assert [e["quality"]["n"] for e in two["same_members"]["at_first"]] == [4 - above] * 3
    with Store(url, create=False) as store:
        assert stored_summary(store, again["run_id"])["text"] == again["text"]  # type: ignore[index]
    table = "\n".join(calibration_lines(again))
    assert f"{above} above --against-max-params" in table and "quality, at 1x" in table


def test_bad_text_options_are_one_line_before_anything_is_written(tmp_path: Path, pools: Pools) -> None:
    db = tmp_path / "b.db"
    for argv, words in (
        (["--against", "nosuchtask"], "--against nosuchtask"),
        (["--against", "bytelm_en", "--sizes", "0"], "--sizes: 0"),
        (["--against", "bytelm_en", "--sizes", "x"], "--sizes 'x'"),
        (["--against", "bytelm_en", "--tokens-per-param", "-1"], "--tokens-per-param -1"),
        (["--against", "bytelm_en", "--against-max-params", "0"], "--against-max-params 0"),
        (["--from-runs", "abc"], "no store at"),  # a run to read, in a store that is not there
    ):
        code, out, err = evolve("calibrate", *TINY, *argv, "--store", f"sqlite:///{db}")
        assert code == 2 and out == "" and words in err and err.count("\n") == 1, (argv, err)
    assert not db.exists() and pools.made == []


def test_the_best_of_a_stored_run_joins_the_panel(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, db)
    with Store(f"sqlite:///{db}", create=False) as store:
        from dogma_evolve.evolution.calibrate.panel import stored_best

        (member,) = stored_best(space(max_params=250_000), store, ["15ea"])
    assert member.name == "run:15ea3469eb87" and member.params > 0
    panel = make_panel(space(max_params=250_000), 2, 2, 0, extra=[member])
    assert [m.name for m in panel][:3] == [
        "preset:gpt2-small@64x2",
        "preset:gpt2-small@32x1",
        "run:15ea3469eb87",
    ]


def test_growing_a_member_reaches_the_size_nearest_its_factor() -> None:
    s = space(task="suite")
    members = make_panel(s, 2, 2, 0)
    for m in members:
        assert grow(m.genome, 1.0, s.pinned, m.name).id == m.genome.id  # its own shape and pinning
        text = grow(m.genome, 1.0, {"vocab": 257, "max_len": 64}, m.name)
        assert text.structural["vocab"] == 257 and non_embedding(text) == non_embedding(m.genome)
        n = non_embedding(m.genome)
        for factor in (4.0, 16.0):
            grown = non_embedding(grow(m.genome, factor, s.pinned, m.name))
            assert factor * n / 2 < grown < factor * n * 2, (m.name, factor, n, grown)


def test_a_size_over_the_text_is_not_trained() -> None:
    s = space()
    members = make_panel(s, 1, 3, 0)
    grown = grow_panel(members, make_target("bytelm_en", (1.0,), 5000.0))
    assert all(g.steps is None for g in grown)  # 5000 tokens a parameter pass 6M bytes over 4 times
    plan = make_plan("mqar", 10, (5, 10), 20, 3, presets=1, max_params=100_000, text=grown_target())
    assert {p.size for p in plan.points} == {0.0, 1.0}


def test_a_capped_size_is_not_trained_and_its_rankings_compare_like_with_like() -> None:
    s = space()
    members = make_panel(s, 1, 5, 0)
    free = grow_panel(members, make_target("bytelm_en", (1.0, 4.0), 1.0))
    cap = sorted(g.params for g in free if g.size == 4.0)[2]  # three of the six 4x members under it
    target = make_target("bytelm_en", (1.0, 4.0), 1.0, cap)
    assert (
        target.key()["max_params"] == cap and "max_params" not in make_target("bytelm_en", (1.0,), 1.0).key()
    )
    grown = grow_panel(members, target)
    assert [g.steps is None for g in grown] == [g.params > cap for g in free]
    plan = make_plan("mqar", 10, (5, 10), 20, 5, presets=1, max_params=100_000, text=target)
    assert sum(p.size == 4.0 for p in plan.points) == 3
    for p in plan.points:  # the fitness ranks the 1x text perfectly; the 4x text reverses it
        q = 0.1 * p.member
        loss = (3.0 - q if p.size == 1.0 else 2.0 + q) if p.size else 1.0
        p.settle("ok", {"quality": q + 0.001 * p.steps, "loss": loss}, "trained")
    one, four = summary(plan, resamples=200)["text"]["rows"]
    assert (one["capped"], four["capped"], four["over"]) == (0, 3, 0)
    assert four["by_fidelity"][1]["quality"]["spearman"] == pytest.approx(-1.0)
    same = four["same_members"]
    assert same["first_label"] == "1x" and one["same_members"] is None
    assert [e["quality"]["n"] for e in same["at_first"]] == [3, 3, 3]  # the 4x members only, at 1x
    assert same["at_first"][1]["quality"]["spearman"] == pytest.approx(1.0)
    assert same["first_size"]["spearman"] == pytest.approx(-1.0) and same["first_size"]["n"] == 3


def grown_target():  # type: ignore[no-untyped-def]
    return make_target("bytelm_en", (1.0,), 1.0)


def test_a_stratified_panel_takes_the_families_in_turn() -> None:
    s = space(task="suite", max_params=250_000)
    plain = make_panel(s, 0, 12, 5)
    mixed = make_panel(s, 0, 12, 5, stratify=True)
    assert [m.name for m in mixed] == [f"random:{k}" for k in range(12)]
    assert len({family_of(m.genome) for m in mixed}) >= len({family_of(m.genome) for m in plain})
    counts: dict[str, int] = {}
    for m in mixed:
        counts[family_of(m.genome)] = counts.get(family_of(m.genome), 0) + 1
    assert max(counts.values()) - min(counts.values()) <= max(1, 12 // len(counts))
    assert [m.genome.id for m in make_panel(s, 0, 12, 5, stratify=True)] == [m.genome.id for m in mixed]


def test_text_rows_rank_each_fidelity_against_the_loss() -> None:
    rng = random.Random(0)
    quality = [rng.random() for _ in range(12)]
    qualities = {5: [q + 0.01 * rng.random() for q in quality], 10: quality}
    agree = [2.0 - q for q in quality]  # the better the fitness, the lower the loss
    rows = text_rows(
        qualities,
        {5: [1.0 + q for q in quality], 10: [1.0] * 12},
        10,
        (1.0, 4.0),
        {1.0: agree, 4.0: [1.0 + q for q in quality[:-1]] + [None]},
        {1.0: 0, 4.0: 1},
        ["ssm"] * 6 + ["rnn"] * 6,
        0.25,
        resamples=200,
    )
    one, four = rows
    assert one["by_fidelity"][1]["quality"]["spearman"] == pytest.approx(1.0)
    assert one["by_fidelity"][1]["quality"]["recall"] == 1.0
    assert one["by_fidelity"][1]["loss"]["spearman"] is None  # a constant loss ranks nothing
    assert one["by_fidelity"][0]["loss"]["spearman"] < -0.9  # a loss that rises with quality ranks backwards
    assert four["by_fidelity"][1]["quality"]["spearman"] == pytest.approx(-1.0)
    assert four["by_fidelity"][1]["quality"]["n"] == 11 and four["over"] == 1
    assert [f["family"] for f in one["families"]] == ["rnn", "ssm"]
    assert all(f["spearman"] == pytest.approx(1.0) and f["n"] == f["measured"] == 6 for f in one["families"])
    assert [(f["n"], f["measured"]) for f in four["families"]] == [(6, 5), (6, 6)]  # rnn's last: no 4x loss
    data = summary_stub(rows)
    assert any(
        line.startswith("warning: the fitness") and "at 4x" in line for line in calibration_lines(data)
    )


def test_size_taken_out_leaves_what_the_design_adds() -> None:
    """Losses that fall with N plus a design effect: N alone ranks them well, the fitness that
    sees only the design ranks the residual perfectly and the raw loss less well."""
    rng = random.Random(1)
    params = [rng.randrange(10_000, 300_000) for _ in range(20)]
    design = [rng.gauss(0.0, 0.05) for _ in range(20)]
    losses = [3.0 - 0.2 * math.log(n) + d for n, d in zip(params, design, strict=True)]
    residual = size_residuals(losses, params)
    assert stats.spearmanr(residual, design).statistic > 0.9  # up to what the fit takes from the design
    assert size_residuals(losses[:2] + [None] * 18, params) == [None] * 20  # too few to fit
    quality = [-d for d in design]  # a fitness that knows the design and not the size
    (row,) = text_rows(
        {10: quality}, None, 10, (1.0,), {1.0: losses}, {}, ["x"] * 20, 0.25, 200, {1.0: params}
    )
    entry = row["by_fidelity"][0]
    assert entry["quality_given_size"]["spearman"] > 0.9
    assert row["size_alone"]["spearman"] > entry["quality"]["spearman"]
    lines = calibration_lines(summary_stub([row]) | {"text": {**summary_stub([row])["text"], "sizes": [1.0]}})
    assert any("parameters" in line.split() for line in lines) and any("N out" in line for line in lines)


def summary_stub(rows):  # type: ignore[no-untyped-def]
    """The smallest summary `calibration_lines` prints with a language target."""
    empty = {
        "n": 0,
        "min": None,
        "q1": None,
        "median": None,
        "q3": None,
        "max": None,
        "chance": None,
        "floor": None,
    }
    return {
        "run_id": "r",
        "task": "mqar",
        "steps": 10,
        "rungs": [5, 10],
        "target": 20,
        "promote": 0.25,
        "floor": None,
        "presets": 0,
        "seed": 0,
        "panel": [{}] * 12,
        "rows": [
            {"steps": s, "quality": empty, "failed": 0, "missing": 0, "vs_full": None, "vs_target": None}
            for s in (5, 10, 20)
        ],
        "text": {"task": "bytelm_en", "sizes": [1.0, 4.0], "tokens_per_param": 20.0, "rows": rows},
    }


def test_a_summary_of_a_settled_plan_has_the_text_section() -> None:
    plan = make_plan("mqar", 10, (5, 10), 20, 2, presets=2, max_params=100_000, text=grown_target())
    for p in plan.points:
        loss = 3.0 - 0.1 * p.member if p.size else 1.0
        p.settle("ok", {"quality": 0.1 * p.member + 0.001 * p.steps, "loss": loss}, "trained")
    data = summary(plan, resamples=200)
    (row,) = data["text"]["rows"]
    assert row["by_fidelity"][1]["quality"]["spearman"] == pytest.approx(1.0)
    assert [m["text"]["1x"] for m in data["panel"]] == [pytest.approx(3.0 - 0.1 * i) for i in range(4)]
