"""What the soak (`benchmarks/soak.py`) runs against: its own durable PostgreSQL server, a Ray
cluster of two nodes on loopback, and readers polling the store.

* :class:`DurablePostgres`: ``initdb`` in a temporary folder, ``postgres`` on 127.0.0.1 at a
  free port with the server's default durability (``fsync``, ``synchronous_commit`` and
  ``full_page_writes`` on; CI's throw-away server turns them off, which a restart test must
  not). :meth:`DurablePostgres.crash_restart` stops it in ``immediate`` mode (no checkpoint:
  the restart recovers from the WAL, as after a crash) and starts it again. As root, initdb
  and postgres run as the ``postgres`` account, as ``.ci/with-postgres`` does.
* :class:`TwoNodes`: ``ray.cluster_utils.Cluster``, a head and one worker node of one CPU each,
  as ``tests/test_multinode.py`` sets it up; :meth:`TwoNodes.kill_worker` SIGKILLs the worker
  node's processes and :meth:`TwoNodes.add_worker` starts a new one.
* :class:`Driver`: one ``evolve run`` in a process group of its own, killed with SIGKILL.
* :func:`poll_runs`: a reader, ``evolve runs --json`` every ``interval_s`` (the CLI's own
  ``main`` in one process, so a poll costs a query, not an interpreter start), one JSON line
  per poll to a log the soak reads back.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: What the soak's server must run with: the defaults, durable commits.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
USER = "evolve_soak"


def free_port() -> int:
    """A loopback port nothing listened on a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bindir() -> Path | None:
    """The folder of initdb and pg_ctl: pg_config's, else Debian's newest major version."""
    config = shutil.which("pg_config")
    if config:
        found = subprocess.run([config, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(found.stdout.strip())
        if found.returncode == 0 and (bindir / "initdb").is_file():
            return bindir
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(part) if part.isdigit() else 0 for part in p.parent.parent.name.split(".")],
    )
    return candidates[-1].parent if candidates else None


class DurablePostgres:
    """A PostgreSQL server of the soak's own (module docstring); a context manager."""

    def __init__(self, bindir: Path | None = None) -> None:
        found = bindir or postgres_bindir()
        if found is None:
            raise RuntimeError("PostgreSQL's initdb was not found (pg_config, /usr/lib/postgresql)")
        self.bindir = found
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="evolve-soak-pg."))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.password = secrets.token_hex(16)
        self.running = False

    def _command(self, *argv: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv)

    def _pg(self, *argv: str, timeout_s: float = 120.0) -> None:
        done = subprocess.run(self._command(*argv), capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{Path(argv[0]).name} exited {done.returncode}: {done.stderr[-2000:]}{log}")

    def __enter__(self) -> DurablePostgres:
        try:
            self.init()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if self.as_root:
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        self._pg(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        pwfile.unlink()

    def start(self) -> None:
        """Start the server: loopback only, its socket in its folder, durability as initdb set
        it (nothing turned off)."""
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=100"
        self._pg(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._pg(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def crash_restart(self, down_s: float) -> float:
        """Stop in ``immediate`` mode (a crash: no shutdown checkpoint), stay down ``down_s``
        seconds, start (recovery replays the WAL); the seconds it was down."""
        began = time.monotonic()
        self.stop("immediate")
        time.sleep(down_s)
        self.start()
        return time.monotonic() - began

    def close(self) -> None:
        if self.running:
            try:
                self.stop("fast")
            except (RuntimeError, subprocess.TimeoutExpired):
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new database on the server; its URL."""
        from sqlalchemy import create_engine, text

        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def settings(self) -> dict[str, str]:
        """The durability settings the running server reports."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url())
        try:
            with engine.connect() as connection:
                return {name: str(connection.execute(text(f"SHOW {name}")).scalar_one()) for name in DURABLE}
        finally:
            engine.dispose()


class TwoNodes:
    """A Ray head and one worker node on 127.0.0.1, one CPU each (module docstring)."""

    NODE: dict[str, Any] = {
        "num_cpus": 1,
        "node_ip_address": "127.0.0.1",
        "object_store_memory": 128 * 1024**2,
        "include_dashboard": False,
    }

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        # the head's GCS takes Ray's default port, or a free one when another cluster has it
        self.cluster = Cluster(initialize_head=True, head_node_args=self.NODE)
        try:
            self.worker = self.cluster.add_node(**self.NODE)
            self.cluster.wait_for_nodes()
        except BaseException:
            self.cluster.shutdown()
            raise

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    @property
    def worker_id(self) -> str:
        return str(self.worker.node_id)

    def kill_worker(self) -> str:
        """SIGKILL every process of the worker node (its raylet and the trainings on it);
        the killed node's id."""
        killed = self.worker_id
        self.cluster.remove_node(self.worker, allow_graceful=False)
        return killed

    def add_worker(self) -> str:
        self.worker = self.cluster.add_node(**self.NODE)
        self.cluster.wait_for_nodes()
        return self.worker_id

    def shutdown(self) -> None:
        self.cluster.shutdown()


class Driver:
    """One `evolve run` process, in a process group of its own (its output to files)."""

    def __init__(self, argv: list[str], logs: Path, number: int) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the flag alone decides
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.out, self.err = logs / f"driver{number}.out", logs / f"driver{number}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            cmd = [sys.executable, "-m", "dogma_evolve.evolution.cli.main", *argv]
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=env, cwd=REPO, start_new_session=True
            )
        self.started = time.monotonic()
        self.killed = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.killed = True
        self.proc.wait()

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def ending(self) -> str:
        """How it exited: the code and the last line of its stderr."""
        lines = [line for line in self.err.read_text(errors="replace").splitlines() if line.strip()]
        return f"exit {self.proc.returncode}" + (f": {lines[-1][:160]}" if lines else "")

    def result(self) -> dict[str, Any]:
        return dict(json.loads(self.out.read_text()))


def poll_runs(url: str, log: Path, interval_s: float, max_s: float) -> None:
    """Run ``evolve runs --json`` on ``url`` every ``interval_s`` seconds for at most ``max_s``
    (or until killed); append one line per poll to ``log``: its time (epoch seconds), whether
    it answered (exit 0 with a JSON list), and the error otherwise."""
    from dogma_evolve.evolution.cli.main import main

    end = time.monotonic() + max_s
    with log.open("a", buffering=1) as out:
        while time.monotonic() < end:
            began = time.time()
            stdout, stderr = io.StringIO(), io.StringIO()
            try:
                with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                    code = main(["runs", "--json", "--store", url])
                ok = code == 0 and isinstance(json.loads(stdout.getvalue()), list)
                error = "" if ok else f"exit {code}: {stderr.getvalue().strip()[-300:]}"
            except (Exception, SystemExit) as exc:  # a reader failure is what is counted
                ok, error = False, f"{type(exc).__name__}: {str(exc)[:300]}"
            out.write(json.dumps({"t": began, "ok": ok, "error": error}) + "\n")
            time.sleep(max(0.0, interval_s - (time.time() - began)))


def read_polls(log: Path) -> list[dict[str, Any]]:
    """The polls a reader logged (a line cut short by the reader's kill is left out)."""
    polls = []
    for line in log.read_text().splitlines() if log.exists() else []:
        with contextlib.suppress(ValueError):
            polls.append(json.loads(line))
    return polls


def reader_failures(
    polls: Sequence[dict[str, Any]], outages: Sequence[tuple[float, float]]
) -> dict[str, Any]:
    """Polls, failures, and failures outside ``outages`` (epoch-second spans when the server
    was down, widened by 5 s: a reader may fail then, and is counted apart). Polls before the
    first driver made the store (refused: no runs table) are counted as ``before_store``."""
    made = min((p["t"] for p in polls if p["ok"]), default=float("inf"))
    early = [p for p in polls if p["t"] < made and "no runs table" in p["error"]]
    polls = [p for p in polls if p not in early]
    failed = [p for p in polls if not p["ok"]]
    unexpected = [p for p in failed if not any(a - 5 <= p["t"] <= b + 5 for a, b in outages)]
    return {
        "polls": len(polls),
        "before_store": len(early),
        "failures": len(failed),
        "failures_outside_outages": len(unexpected),
        "errors": sorted({p["error"] for p in unexpected})[:5],
    }
