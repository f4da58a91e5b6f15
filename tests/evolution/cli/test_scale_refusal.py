"""A scale setting the text cannot feed is refused in one line before anything trains.

Every training the commands plan on a finite text (`bytelm`, `text`, `bytelm_en`) is held to
the epoch cap (`evolution.scale.regime.MAX_EPOCHS`: 4 passes over the training text): `evolve
run`'s fitness (`--steps`, up to 10x under `--budget flops`) and its ladder's given sizes or
token count (`--ladder-sizes`, `--ladder-tokens`) at startup and on `--resume`, `evolve scale`'s
ladder, `evolve calibrate`'s `--target`, `--sizes` and `--against-max-params`. Each refusal is
exit 2 with one line naming the setting, the tokens it needs, the text's tokens and the most
the text allows, before a store is created (or, on a resume, before anything is added to it);
the settings at the largest the line names are accepted. Nothing here trains."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from dogma_evolve.evaluation.tasks import get_task
from dogma_evolve.evolution.calibrate.panel import make_panel
from dogma_evolve.evolution.calibrate.text import check_fed, grow_panel, make_target
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.preflight import check_feasible, check_text
from dogma_evolve.evolution.scale.regime import MAX_EPOCHS, largest_size, text_tokens_of
from dogma_evolve.evolution.scale.train import Budget, make_plan
from dogma_evolve.evolution.scale.train import check_fed as ladder_fed
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from tests.in_process import evolve_in_process as cli

TEXT = 5_999_963  # the English corpus's training bytes (`text`, `bytelm_en`)
SMOKE = 419_645  # `bytelm`'s (Python's documentation)


def refused(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, nothing on stdout (`--json` too), one line `evolve: error: ...` with `words`."""
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("evolve: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)


def rows(db: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608


def test_the_texts_are_the_ones_the_numbers_are_quoted_for() -> None:
    assert text_tokens_of(get_task("text")) == TEXT == text_tokens_of(get_task("bytelm_en"))
    assert text_tokens_of(get_task("bytelm")) == SMOKE
    # the largest size the English text feeds at 20 tokens per parameter, in bytelm_en's steps
    assert largest_size(TEXT, 20.0, MAX_EPOCHS, 2048) == 1_199_974


RUN_REFUSALS = [
    (
        ["--steps", "23438"],
        ["--steps 23,438", "24,000,512 tokens", "5,999,963-token", "at most --steps 23,437"],
    ),
    (["--steps", "2344", "--budget", "flops"], ["up to 10x under --budget flops", "at most --steps 2,343"]),
    (["--task", "bytelm", "--steps", "820"], ["--steps 820", "419,645-token", "at most --steps 819"]),
    (["--task", "text,bytelm", "--steps", "820"], ["bytelm task's", "at most --steps 819"]),
    (
        ["--ladder", "--ladder-sizes", "1e4,4e4,2e5,1.2e6", "--ladder-tokens-per-param", "20"],
        ["--ladder-sizes: 1 size(s) from 1,200,000 parameters", "24,000,512 tokens", "5,999,963-token"],
    ),
    (["--ladder", "--ladder-sizes", "1e5,4e5,2e6,1e7"], ["at most 4,799,897 parameters at 5 tokens/param"]),
    (
        ["--ladder", "--ladder-tokens", "3e7"],
        ["--ladder-tokens: 29,999,104 tokens", "at most 23,999,488 tokens"],
    ),
]


@pytest.mark.parametrize(("argv", "words"), RUN_REFUSALS, ids=[" ".join(a) for a, _ in RUN_REFUSALS])
def test_evolve_run_refuses_a_training_past_the_cap_before_a_store_exists(
    tmp_path: Path, argv: list[str], words: list[str]
) -> None:
    db = tmp_path / "never.db"
    refused(*cli("run", *argv, "--quiet", "--json", "--store", f"sqlite:///{db}"), *words)
    assert not db.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"steps": 23_437},  # 4 passes over the English text, to the step
        {"steps": 2_343, "budget": "flops"},
        {"task": "bytelm", "steps": 819},
        {"ladder": True, "ladder_sizes": ("1e4", "4e4", "2e5", "1199974"), "ladder_tokens_per_param": 20.0},
        {"ladder": True, "ladder_sizes": ("1e5", "4e5", "2e6", "4799897")},  # at the default 5
        {"ladder": True, "ladder_tokens": 23_999_488.0},
        {"ladder": True},  # each elite's compact ladder: checked when it is made, after the search
    ],
)
def test_the_largest_settings_the_refusals_name_are_accepted(options: dict[str, object]) -> None:
    config = RunConfig(**options)  # type: ignore[arg-type]
    check_text(config, check_feasible(config))


def test_a_resume_with_a_ladder_past_the_cap_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    from dogma_evolve.evolution.study import create_search

    db = tmp_path / "r.db"
    with create_search(f"sqlite:///{db}", population=2, generations=0, steps=1) as search:
        run_id = search.run_id  # made, nothing evaluated
    before = {t: rows(db, t) for t in ("evaluations", "ladder_ranks", "individuals")}
    ladder = ["--ladder", "--ladder-sizes", "1e4,4e4,2e5,5e6"]
    refused(
        *cli("run", "--resume", run_id, *ladder, "--quiet", "--store", f"sqlite:///{db}"), "--ladder-sizes"
    )
    assert (
        {t: rows(db, t) for t in before} == before == {"evaluations": 0, "ladder_ranks": 0, "individuals": 0}
    )
    with pytest.raises(UsageError, match="--ladder-sizes"):  # the library checks the same
        from dogma_evolve.evolution.study import load_search

        with load_search(
            f"sqlite:///{db}", run_id, ladder=True, ladder_sizes=("1e4", "4e4", "2e5", "5e6")
        ) as s:
            s.optimize()
    assert rows(db, "evaluations") == 0


SCALE_REFUSALS = [
    (
        ["--sizes", "1e4,4e4,2e5,1.3e6", "--tokens-per-param", "20"],
        ["--sizes: 1 size(s) from 1,253,808 parameters", "25,075,712 tokens", "at most 1,199,974 parameters"],
    ),
    (["--tokens", "3e7", "--json"], ["--tokens: 29,999,104 tokens a size", "at most 23,999,488 tokens"]),
]


@pytest.mark.parametrize(("argv", "words"), SCALE_REFUSALS, ids=[" ".join(a) for a, _ in SCALE_REFUSALS])
def test_evolve_scale_refuses_a_ladder_past_the_cap_before_a_store_exists(
    tmp_path: Path, argv: list[str], words: list[str]
) -> None:
    db = tmp_path / "never.db"
    refused(*cli("scale", "preset:gpt2-small", *argv, "--store", f"sqlite:///{db}"), *words)
    assert not db.exists()


def test_a_ladder_at_the_largest_size_and_token_count_is_planned() -> None:
    from dogma_evolve.evolution.scale.ladder import Design
    from dogma_evolve.genome import load_genome

    ladder_fed("bytelm_en", [1e4, 1_199_974], [Budget(per_param=20.0)], "--sizes", "")  # the targets
    task = get_task("bytelm_en")
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    design = Design.of(load_genome("preset:gpt2-small"), pinned, "gpt2-small", preset=True)
    plan = make_plan(design, "both", "bytelm_en", None, [Budget(tokens=23_999_488)], 2)  # no training
    assert max(p.epochs or 0.0 for p in plan.points) == pytest.approx(MAX_EPOCHS, rel=1e-3)


TINY = ["--steps", "10", "--rungs", "5,10", "--presets", "2", "--random", "2", "--max-params", "100000"]
CALIBRATE_REFUSALS = [
    (
        ["--task", "mqar", "--target", "20", "--against", "bytelm_en", "--sizes", "1,64"],
        [
            "--sizes: ",
            "member(s) at 64x",
            "at most 1,199,974 parameters at 20 tokens/param",
            "--against-max-params",
        ],
    ),
    (
        ["--task", "mqar", "--target", "20", "--against", "bytelm_en", "--against-max-params", "1199975"],
        ["--against-max-params 1,199,975", "24,000,512 tokens", "at most --against-max-params 1,199,974"],
    ),
    (["--task", "text", "--target", "23438"], ["--target 23,438", "at most --target 23,437"]),
    (["--task", "text", "--steps", "2400"], ["--target 24,000", "the default --target is 10 x --steps"]),
]


@pytest.mark.parametrize(
    ("argv", "words"), CALIBRATE_REFUSALS, ids=[" ".join(a) for a, _ in CALIBRATE_REFUSALS]
)
def test_evolve_calibrate_refuses_what_the_text_cannot_feed_before_a_store_exists(
    tmp_path: Path, argv: list[str], words: list[str]
) -> None:
    db = tmp_path / "never.db"
    refused(*cli("calibrate", *TINY, *argv, "--json", "--store", f"sqlite:///{db}"), *words)
    assert not db.exists()


def test_a_calibration_capped_at_the_largest_size_is_accepted_and_leaves_the_rest_out() -> None:
    space = DogmaSpace.from_config(RunConfig(task="mqar", steps=10, max_params=100_000))
    members = make_panel(space, 2, 2, 0)
    target = make_target("bytelm_en", (1.0, 64.0), 20.0, 1_199_974)
    grown = grow_panel(members, target)
    check_fed(grown, target)  # at the cap: accepted
    assert any(g.steps is None for g in grown)  # the 64x members above it are left out, capped
    assert all(g.tokens <= MAX_EPOCHS * TEXT for g in grown if g.steps is not None)
