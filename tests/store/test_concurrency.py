"""Several driver processes, each with its own run, write one store at once (SQLite file and
PostgreSQL database), while a reader polls it: exact row counts, no lock error surfaces."""

from __future__ import annotations

import hashlib
import multiprocessing
import time
import traceback

from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, LineageIn, Store, by_id, by_slot

WRITERS = 6
GENERATIONS = 20
SIZE = 6  # births per generation; slot 0 is a genome every run shares in that generation


def _genome(text: str) -> GenomeIn:
    yaml_text = f"regions:\n- name: {text}\n"
    return GenomeIn(hashlib.sha256(yaml_text.encode()).hexdigest(), yaml_text, "ACGT")


def _drive(url: str, writer: int, results) -> None:
    """One driver: its own run, GENERATIONS generations, every third one sent twice."""
    try:
        with Store(url) as store:
            run_id = store.create_run({"writer": writer}, seed=writer, task="mqar")
            population: list[int] = []
            for generation in range(GENERATIONS):
                genomes = [_genome(f"shared-{generation}")] + [
                    _genome(f"w{writer}-g{generation}-s{slot}") for slot in range(1, SIZE)
                ]
                parents = population[:2]
                kwargs = dict(
                    genomes=genomes,
                    individuals=[
                        IndividualIn(slot, g.id, seed=slot, operator="point" if parents else None)
                        for slot, g in enumerate(genomes)
                    ],
                    evaluations=[
                        EvaluationIn(
                            g.id,
                            "mqar",
                            0,
                            slot,
                            "ok",
                            {"loss": slot / 10},
                            individual=by_slot(slot),
                        )
                        for slot, g in enumerate(genomes)
                    ],
                    lineage=[
                        LineageIn(slot, by_id(parent), "point") for slot in range(SIZE) for parent in parents
                    ],
                    members=[by_slot(slot) for slot in range(SIZE)],
                )
                ids = store.commit_generation(run_id, generation, **kwargs)
                if generation % 3 == 0:
                    assert store.commit_generation(run_id, generation, **kwargs) == ids
                assert [i.id for i in store.population(run_id)] == list(ids.values())
                population = list(ids.values())
            store.set_run_status(run_id, "finished")
        results.put((writer, run_id, None))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put((writer, None, traceback.format_exc()))


def test_concurrent_writers_lose_and_double_nothing(store_url: str, helpers) -> None:
    url = store_url
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    results = context.Queue()
    processes = [context.Process(target=_drive, args=(url, writer, results)) for writer in range(WRITERS)]
    for process in processes:
        process.start()
    # meanwhile a reader (the `evolve show` of a user) polls the file
    outcomes = []
    reads = 0
    deadline = time.monotonic() + 120
    with Store(url) as reader:
        while len(outcomes) < WRITERS:
            for run in reader.list_runs():
                population = reader.population(run.id)
                assert len(population) in (0, SIZE)
                reads += 1
            while not results.empty():
                outcomes.append(results.get())
            assert time.monotonic() < deadline, "writers did not finish in time"
    for process in processes:
        process.join(timeout=30)
    errors = [error for _, _, error in outcomes if error]
    assert not errors, errors[0]
    assert all(process.exitcode == 0 for process in processes)
    assert reads > 0

    births = WRITERS * GENERATIONS * SIZE
    counts = helpers.row_counts(url)
    assert counts == {
        "runs": WRITERS,
        # one shared genome per generation, the rest per writer
        "genomes": GENERATIONS + WRITERS * GENERATIONS * (SIZE - 1),
        "individuals": births,
        "members": births,
        "evaluations": births,  # the natural key includes the run
        "lineage": WRITERS * (GENERATIONS - 1) * SIZE * 2,
        "policy": 0,
        "archive": 0,
        "artifacts": 0,
    }
    with Store(url) as store:
        runs = store.list_runs()
        assert sorted(r.id for r in runs) == sorted(run_id for _, run_id, _ in outcomes)
        for run in runs:
            assert (run.status, run.last_generation, run.evaluated) == (
                "finished",
                GENERATIONS - 1,
                GENERATIONS * SIZE,
            )
            assert len(store.ancestry(store.population(run.id)[0].id)) > GENERATIONS
