"""A soak: one search on PostgreSQL across two Ray nodes, disrupted again and again, resumed
after each disruption, and compared at the end with an uninterrupted run of the same seed.

    python -m benchmarks.soak                      # the full soak: 10 driver kills, a worker
                                                   # node kill, a PostgreSQL crash-restart
    python -m benchmarks.soak --kills 3 --node-kills 0 --restarts 0   # a short one

What it does (every process on 127.0.0.1, every wait bounded by ``--max-minutes``):

1. Starts its own PostgreSQL server (:class:`~benchmarks.soak_infra.DurablePostgres`: initdb
   in a temporary folder, durable commits, the settings checked) with two databases, and a
   Ray cluster of two nodes (:class:`~benchmarks.soak_infra.TwoNodes`).
2. Runs the search uninterrupted into ``reference`` (``evolve run --ray-address``), noting when
   its run appeared and when each generation was committed: the pace the kills are drawn by.
3. Runs the same command into ``soak`` while readers poll it (``evolve runs --json`` every
   half second), and strikes the disruptions of the plan in a random order (``--seed``):
   * **driver SIGKILL**: the driver's process group killed after a delay drawn uniformly
     from a fifth of the reference's start-up time to its start-up plus 1.5 times what the
     generation in flight took the reference, so it lands while starting, while a
     generation trains, while one commits or after (:meth:`Soak.kill_driver`);
   * **worker node SIGKILL**: once a lease on the worker node is running (an evaluation in
     flight there), every process of that node is killed, and a new worker node started;
     the driver goes on (the pool retries the lost attempt), and is killed as soon as the
     retry runs (one of the driver kills): the attempts a dead driver leaves in flight;
   * **PostgreSQL crash-restart**: ``pg_ctl stop -m immediate`` while the driver works, down
     a few seconds, started again; what was committed before must still be there.
   After each, a driver that is gone is replaced by ``evolve run --resume RUN``; what the
   store held when it started (committed generations, leases left running, the run's shown
   status) is what that resume found.
4. Resumes until the run finishes, then compares (:mod:`benchmarks.soak_compare`): the same
   best, front, evaluation count, births, members and stored metrics as the reference; no
   lease left running, no duplicate row, ``evolve check`` clean (every artifact's sha256).

It prints one table, what struck when and what followed, then the verdict; ``--json FILE``
writes everything. Exit 0 when the end state is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.pool import NullPool

from benchmarks.soak_compare import compare, snapshot
from benchmarks.soak_infra import (
    DURABLE,
    REPO,
    Driver,
    DurablePostgres,
    TwoNodes,
    poll_runs,
    read_polls,
    reader_failures,
)

#: The search: small enough for two CPUs, long enough for ten kills to land in every phase (with
#: ten generations, a loaded machine finished the run before the tenth kill could strike).
SEARCH = ("--population", "4", "--generations", "20", "--steps", "5", "--seed", "11")
DRIVER, NODE, POSTGRES = "driver SIGKILL", "worker node SIGKILL", "PostgreSQL crash-restart"
RETRY = "driver SIGKILL at once"  # struck as a DRIVER event, right after a worker node kill


@dataclass(frozen=True)
class Plan:
    """What the soak strikes, and how it searches."""

    kills: int = 10
    node_kills: int = 1
    restarts: int = 1
    readers: int = 1
    search: tuple[str, ...] = SEARCH
    seed: int = 0
    down_s: float = 3.0
    max_s: float = 3600.0


@dataclass
class Event:
    """One disruption: when (seconds since the soaked run started), what, the state it
    struck in, and what followed (the next resume's findings, or what the driver did)."""

    number: int
    at_s: float
    kind: str
    moment: str
    then: str = ""


@dataclass
class Outcome:
    plan: Plan
    settings: dict[str, str]
    reference_s: float
    soak_s: float
    events: list[Event] = field(default_factory=list)
    lives: list[str] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    readers: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.verdict.get("identical")) and bool(self.check.get("ok"))


class Soak:
    """The soaked run's side: its driver, its store, its events (module docstring, step 3)."""

    def __init__(self, plan: Plan, url: str, address: str, logs: Path, pace: Pace) -> None:
        self.plan, self.url, self.address, self.logs = plan, url, address, logs
        self.pace = pace
        self.engine = create_engine(url, poolclass=NullPool)  # no connection outlives a restart
        self.rng = random.Random(plan.seed)
        self.run_id: str | None = None
        self.driver: Driver | None = None
        self.lives: list[str] = []
        self.events: list[Event] = []
        self.waiting: Event | None = None  # the event whose `then` the next resume fills
        self.t0 = time.monotonic()
        self.deadline = self.t0 + plan.max_s
        self.outages: list[tuple[float, float]] = []
        self.strikes_left = 1  # this strike and those after it (set by the schedule's loop)

    # -- the store, read beside the driver -------------------------------------------------

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        with self.engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), {"r": self.run_id, **params})]

    def state(self) -> dict[str, Any]:
        """Committed generation, evaluations, leases running, the holder: {} without a run."""
        if self.run_id is None:
            try:
                found = self.query("SELECT id FROM runs")
            except ProgrammingError:  # no tables yet: the first driver has not made the store
                return {}
            if not found:
                return {}
            self.run_id = str(found[0][0])
        [(last, status, driver)] = self.query(
            "SELECT last_generation, status, driver FROM runs WHERE id = :r"
        )
        [(evaluations,)] = self.query("SELECT count(*) FROM evaluations WHERE run_id = :r")
        leases = self.query("SELECT worker FROM leases WHERE run_id = :r AND state = 'running'")
        return {
            "last": last,
            "status": status,
            "driver": driver,
            "evaluations": evaluations,
            "leases": [w or "" for (w,) in leases],
        }

    def moment(self) -> str:
        """The state a disruption strikes in, in words."""
        try:
            state = self.state()
        except Exception as exc:  # the server is down: say so
            return f"store unreachable ({type(exc).__name__})"
        if not state:
            return "starting: no run stored yet"
        held = "held" if state["driver"] else "not yet claimed"
        return (
            f"gen {state['last']} committed, gen {state['last'] + 1} in flight; {state['evaluations']} "
            f"evaluations; {len(state['leases'])} leases running; run {held}"
        )

    def found(self) -> str:
        """What a resume finds: the committed generation, leases left running, shown status."""
        from dogma_evolve.store import Store

        state = self.state()
        if not state:
            return "no run stored: started it anew"
        with Store(self.url, create=False) as store:
            run = store.get_run(str(self.run_id))
            shown = run.shown_status if run is not None else "?"
        return (
            f"gen {state['last']} committed ({state['evaluations']} evaluations), "
            f"{len(state['leases'])} leases left running, run shown {shown}"
        )

    # -- the driver ------------------------------------------------------------------------

    def ensure_driver(self) -> Driver:
        """The live driver; a new one (a resume, or the first run) when there is none; the
        last one when it finished the run."""
        if self.driver is not None and (self.driver.alive() or self.finished()):
            return self.driver
        if self.driver is not None and not self.driver.killed:  # it exited by itself: say how
            self.lives[-1] += f"; {self.driver.ending()}"
        self.check_time()
        found = self.found()
        if self.waiting is not None:
            self.waiting.then += ("; " if self.waiting.then else "") + f"resume found {found}"
            self.waiting = None
        common = ["--ray-address", self.address, "--store", self.url, "--json", "--quiet"]
        argv = (
            ["run", "--resume", self.run_id, *common] if self.run_id else ["run", *self.plan.search, *common]
        )
        self.driver = Driver(argv, self.logs, len(self.lives))
        self.lives.append(f"{self.elapsed():7.1f} s  {'resume' if self.run_id else 'new run'}: found {found}")
        return self.driver

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"the soak ran past {self.plan.max_s:.0f} s")

    def finished(self) -> bool:
        """Whether the driver exited 0: the run is done and nothing is left to strike."""
        return self.driver is not None and self.driver.proc.poll() == 0

    def sleep_alive(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` while the driver lives; whether it is still alive."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and self.driver is not None and self.driver.alive():
            time.sleep(0.1)
        return self.driver is not None and self.driver.alive()

    def strike(self, kind: str, moment: str) -> Event:
        event = Event(len(self.events) + 1, round(self.elapsed(), 1), kind, moment)
        self.events.append(event)
        return event

    # -- the disruptions -------------------------------------------------------------------

    def kill_driver(self, now: bool = False) -> bool:
        """SIGKILL the driver at a random moment (``now``: at once); False when it finished
        first.

        The moment is drawn in two steps, so that the kills neither run out of run to kill
        nor depend on the machine's pace. First how many more generations this life may
        commit: uniformly from 0 to the generations left shared among the strikes still to
        come (the last generation is never reached). Then, once the driver has committed
        them (polled in the store), a delay drawn uniformly from none to 1.5 times what the
        next generation took the reference (ending half a last generation before the run
        would finish), so that the kill lands while it trains, while it commits or just
        after; with no generation to wait for, from a fifth of the start-up to the start-up
        plus that, so that some lands while the driver starts."""
        driver = self.ensure_driver()
        spans, startup = self.pace.spans, self.pace.startup_s
        last = (self.state() or {"last": -1})["last"]
        left = len(spans) - 2 - last  # generations to commit before the last one
        advance = self.rng.randint(0, max(0, left // max(1, self.strikes_left))) if not now else 0
        while (self.state() or {"last": -1})["last"] < last + advance:  # this life's commits
            self.check_time()
            if not self.sleep_alive(0.2):
                return False
        ahead = spans[last + advance + 1 :]  # the generations still to commit, at the reference's pace
        # ... and half a last generation before the run would finish (at that pace)
        span = min(1.5 * ahead[0], sum(ahead) - 0.5 * spans[-1]) if ahead else 0.0
        if now:
            delay = 0.0
        elif advance == 0:
            delay = self.rng.uniform(0.2 * startup, startup + max(0.0, span))
        else:
            delay = self.rng.uniform(0.0, max(0.0, span))
        if not self.sleep_alive(delay):
            return False
        event = self.strike(
            DRIVER, f"{time.monotonic() - driver.started:.1f} s into its life; {self.moment()}"
        )
        driver.kill()
        self.lives[-1] += f"; SIGKILL (event {event.number})"
        self.waiting = event
        return True

    def kill_node(self, nodes: TwoNodes) -> bool:
        """SIGKILL the worker node once an evaluation of the live driver runs on it, start a
        new worker node; follow the lost attempt until its retry runs. False when the run
        finished first."""
        node = nodes.worker_id
        leases: list[tuple[Any, ...]] = []
        while not leases:  # an evaluation in flight on that node
            self.check_time()
            driver = self.ensure_driver()
            if not self.sleep_alive(0.25):
                if self.finished():
                    return False
                continue
            try:
                # once the live driver holds the run: its claim closed the leases dead ones left
                held = f":{driver.proc.pid}:" in ((self.state() or {}).get("driver") or "")
                sql = "SELECT genome_id, attempt, worker FROM leases WHERE run_id = :r AND state = 'running'"
                rows = self.query(sql) if held else []
                leases = [row for row in rows if (row[2] or "").endswith("@" + node[:12])]
            except Exception:  # a momentary failure to read: look again
                leases = []
        time.sleep(self.rng.uniform(0.0, 1.0))
        genome, attempt, worker = leases[0]
        moment = f"{self.moment()}; genome {genome[:12]} attempt {attempt} on it ({worker})"
        event = self.strike(NODE, moment)
        nodes.kill_worker()
        replacement = nodes.add_worker()
        event.then = f"worker node {replacement[:12]} started; " + self.follow_lost(genome, attempt)
        if self.driver is not None and not self.driver.alive():
            self.waiting = event
        return True

    def follow_lost(self, genome: str, attempt: int) -> str:
        """What became of the attempts at the killed evaluation's genome: each one's state
        and node, once the killed attempt has ended and a later one runs, or all have ended
        (bounded wait, while the driver lives)."""
        end = time.monotonic() + 180
        sql = (
            "SELECT attempt, state, worker, reason FROM leases "
            "WHERE run_id = :r AND genome_id = :g ORDER BY attempt"
        )
        while time.monotonic() < end and self.driver is not None and self.driver.alive():
            rows = self.query(sql, g=genome)
            ended = all(state != "running" for a, state, _, _ in rows if a <= attempt)
            if rows and ended and (rows[-1][0] > attempt or rows[-1][1] != "running"):
                return "; ".join(
                    f"attempt {a} {s} on node {(w or '?').rpartition('@')[2]}" + (f" ({r[:60]})" if r else "")
                    for a, s, w, r in rows
                )
            time.sleep(0.5)
        return "the driver stopped before the lost attempt was settled"

    def restart_postgres(self, server: DurablePostgres) -> bool:
        """Crash-restart the server while a driver holds the run; check nothing committed
        was lost. False when the run finished first."""
        while True:
            self.check_time()
            driver = self.ensure_driver()
            if not self.sleep_alive(self.rng.uniform(0.5, self.pace.generation_s)):
                if self.finished():
                    return False
                continue
            before = self.state()
            if before.get("driver") and f":{driver.proc.pid}:" in before["driver"]:
                break
        event = self.strike(POSTGRES, self.moment())
        began = time.time()
        down = server.crash_restart(self.plan.down_s)
        self.outages.append((began, time.time()))
        after = self.state()
        kept = after["last"] >= before["last"] and after["evaluations"] >= before["evaluations"]
        event.then = (
            f"down {down:.1f} s; gen {before['last']} / {before['evaluations']} evaluations before, "
            f"gen {after['last']} / {after['evaluations']} after: {'nothing lost' if kept else 'LOST'}"
        )
        if not kept:
            raise AssertionError(f"the crash-restart lost committed rows: {event.then}")
        if self.sleep_alive(2 * self.pace.generation_s):
            event.then += "; the driver went on"
        elif self.driver is not None:
            event.then += f"; the driver stopped ({self.driver.ending()})"
            self.waiting = event
        return True

    def to_the_end(self) -> dict[str, Any]:
        """Resume until a driver exits 0 (at most five more lives); its JSON result."""
        for _ in range(5):
            driver = self.ensure_driver()
            try:
                driver.wait(max(1.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                driver.kill()
                raise TimeoutError(f"the soak ran past {self.plan.max_s:.0f} s") from None
            if driver.proc.returncode == 0:
                self.lives[-1] += "; finished"
                return driver.result()
        raise AssertionError(f"the run did not finish after five resumes: {self.lives[-3:]}")


@dataclass(frozen=True)
class Pace:
    """The uninterrupted run's: seconds until its run appeared, and each generation's seconds
    until its commit (generation 0's from the run's appearance)."""

    startup_s: float
    spans: tuple[float, ...]

    @property
    def generation_s(self) -> float:
        return sum(self.spans) / len(self.spans)


def schedule(plan: Plan, rng: random.Random) -> list[str]:
    """The disruptions in a random order; each worker node kill is followed at once by a
    driver kill while the lost attempt's retry runs (as long as driver kills are left)."""
    paired = min(plan.kills, plan.node_kills)
    strikes = [DRIVER] * (plan.kills - paired) + [NODE] * plan.node_kills + [POSTGRES] * plan.restarts
    rng.shuffle(strikes)
    order = []
    for kind in strikes:
        order.append(kind)
        if kind == NODE and paired:
            order.append(RETRY)
            paired -= 1
    return order


def reference_run(plan: Plan, url: str, address: str, logs: Path) -> tuple[float, Pace]:
    """The uninterrupted run: its wall time and its pace."""
    engine = create_engine(url, poolclass=NullPool)
    common = ["--ray-address", address, "--store", url, "--json", "--quiet"]
    driver = Driver(["run", *plan.search, *common], logs, -1)
    appeared: float | None = None
    committed: list[float] = []  # when each generation was committed
    try:
        while driver.alive() and time.monotonic() - driver.started < plan.max_s:
            time.sleep(0.2)
            try:
                with engine.connect() as connection:
                    rows = connection.execute(text("SELECT last_generation FROM runs")).all()
            except Exception:  # tables not created yet
                continue
            if rows and appeared is None:
                appeared = time.monotonic() - driver.started
            while rows and rows[0][0] >= len(committed):
                committed.append(time.monotonic() - driver.started)
    finally:
        engine.dispose()
        driver.kill()
    if driver.proc.returncode != 0:
        raise AssertionError(f"the reference run failed: {driver.ending()}")
    wall = time.monotonic() - driver.started
    if appeared is None or not committed:
        raise AssertionError("the reference run was not seen committing a generation")
    spans = [b - a for a, b in zip([appeared, *committed], committed, strict=False)]
    return wall, Pace(appeared, tuple(spans))


def run_soak(plan: Plan, echo: Any = print, logs: Path | None = None) -> Outcome:
    """The soak of ``plan`` (module docstring); ``echo`` gets progress lines. The drivers'
    and readers' output go to ``logs`` (kept), else to a temporary folder (removed)."""
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        return _soak(plan, echo, logs)
    with tempfile.TemporaryDirectory(prefix="evolve-soak.") as work:
        return _soak(plan, echo, Path(work))


def _soak(plan: Plan, echo: Any, work: Path) -> Outcome:
    with DurablePostgres() as server:
        settings = server.settings()
        if any(settings[k] != v for k, v in DURABLE.items()):
            raise AssertionError(f"the soak's server is not durable: {settings}")
        reference_url, soak_url = server.create_database("reference"), server.create_database("soak")
        nodes = TwoNodes()
        readers: list[subprocess.Popen[bytes]] = []
        try:
            echo(f"soak: PostgreSQL {settings} on 127.0.0.1:{server.port}; Ray {nodes.address}, 2 nodes")
            reference_s, pace = reference_run(plan, reference_url, nodes.address, work)
            echo(
                f"soak: reference run {reference_s:.0f} s "
                f"(start-up {pace.startup_s:.1f} s; generations "
                f"{', '.join(f'{t:.0f}' for t in pace.spans)} s)"
            )
            reader_cmd = [sys.executable, "-m", "benchmarks.soak", "--reader", soak_url]
            readers = [
                subprocess.Popen([*reader_cmd, str(work / f"reader{i}.jsonl"), str(plan.max_s)], cwd=REPO)
                for i in range(plan.readers)
            ]
            soak = Soak(plan, soak_url, nodes.address, work, pace)
            order = schedule(plan, soak.rng)
            for index, kind in enumerate(order):
                soak.strikes_left = len(order) - index
                done = {
                    DRIVER: soak.kill_driver,
                    RETRY: lambda: soak.kill_driver(now=True),
                    NODE: lambda: soak.kill_node(nodes),
                    POSTGRES: lambda: soak.restart_postgres(server),
                }[kind]()
                if not done:
                    echo(f"soak: the run finished before the {kind} could strike")
                    break
                echo(f"soak: {soak.events[-1].at_s:7.1f} s  {kind}")
            soak.to_the_end()
            soak_s = soak.elapsed()
        finally:
            for reader in readers:
                reader.kill()
                reader.wait()
            nodes.shutdown()
        outcome = Outcome(plan, settings, reference_s, soak_s, soak.events, soak.lives)
        outcome.readers = reader_failures(
            [p for i in range(plan.readers) for p in read_polls(work / f"reader{i}.jsonl")], soak.outages
        )
        assert soak.run_id is not None
        reader = create_engine(reference_url, poolclass=NullPool)
        with reader.connect() as connection:
            reference_id = str(connection.execute(text("SELECT id FROM runs")).scalar_one())
        reader.dispose()
        outcome.verdict = compare(snapshot(soak_url, soak.run_id), snapshot(reference_url, reference_id))
        checked = subprocess.run(
            [sys.executable, "-m", "dogma_evolve.evolution.cli.main", "check", "--json", "--store", soak_url],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
            check=False,
        )
        outcome.check = (
            json.loads(checked.stdout) if checked.stdout.strip() else {"ok": False, "error": checked.stderr}
        )
    return outcome


def table(outcome: Outcome) -> str:
    """The soak's report: what struck when, what followed, the verdict."""
    lines = [f"{'#':>2}  {'t (s)':>7}  {'event':<25}  moment / then", "-" * 110]
    for e in outcome.events:
        lines.append(f"{e.number:>2}  {e.at_s:>7.1f}  {e.kind:<25}  {e.moment}")
        lines.append(f"{'':>38}-> {e.then or 'the driver went on'}")
    counts = {kind: sum(e.kind == kind for e in outcome.events) for kind in (DRIVER, NODE, POSTGRES)}
    v = outcome.verdict
    lines += ["", "drivers:", *[f"  {life}" for life in outcome.lives], ""]
    lines.append(", ".join(f"{n} x {kind}" for kind, n in counts.items()) + f"; {len(outcome.lives)} drivers")
    lines.append(f"reference {outcome.reference_s:.0f} s uninterrupted; soaked run {outcome.soak_s:.0f} s")
    lines.append(f"server: {outcome.settings}")
    lines.append(
        f"end state: {'IDENTICAL to the reference' if v.get('identical') else 'DIFFERENT'}: "
        f"{v.get('births')} births, {v.get('evaluations')} evaluations, best {v.get('best')}, "
        f"front {v.get('front')}, leases {v.get('leases')}, {v.get('artifacts')} artifacts "
        f"({v.get('artifacts_missing')} the reference has are missing)"
    )
    lines += [f"  DIFFERENCE {d}" for d in v.get("differences", [])[:20]]
    lines += [f"  FAULT {f}" for f in v.get("faults", [])]
    findings = outcome.check.get("findings", [])
    lines.append(
        "evolve check: "
        + ("ok" if outcome.check.get("ok") else "PROBLEMS")
        + "; "
        + "; ".join(f"{f['check']} {f['status']}: {f['detail'][:70]}" for f in findings)
    )
    r = outcome.readers
    if r:
        lines.append(
            f"readers: {r['polls']} polls of evolve runs --json once the store existed "
            f"({r['before_store']} before), {r['failures']} failed "
            f"({r['failures_outside_outages']} outside the server's outage) {r['errors']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=Plan.kills, help="driver SIGKILLs (10)")
    parser.add_argument("--node-kills", type=int, default=Plan.node_kills, help="worker node SIGKILLs (1)")
    parser.add_argument("--restarts", type=int, default=Plan.restarts, help="PostgreSQL crash-restarts (1)")
    parser.add_argument("--readers", type=int, default=Plan.readers, help="processes polling evolve runs (1)")
    parser.add_argument("--generations", type=int, default=20, help="the search's offspring generations (20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule (0)")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="bound on the whole soak (60)")
    parser.add_argument("--json", type=Path, help="write the outcome here")
    parser.add_argument("--logs", type=Path, help="keep the drivers' and readers' output in this folder")
    parser.add_argument("--reader", nargs=3, metavar=("URL", "LOG", "MAX_S"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:  # one polling process of a soak
        poll_runs(args.reader[0], Path(args.reader[1]), 0.5, float(args.reader[2]))
        return 0
    search = (*SEARCH[:2], "--generations", str(args.generations), *SEARCH[4:])
    plan = Plan(
        args.kills,
        args.node_kills,
        args.restarts,
        args.readers,
        search,
        args.seed,
        max_s=60 * args.max_minutes,
    )
    began = time.monotonic()
    outcome = run_soak(plan, echo=lambda line: print(line, flush=True), logs=args.logs)
    print(table(outcome))
    print(f"wall time {time.monotonic() - began:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(asdict(outcome), indent=2, default=str))
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
