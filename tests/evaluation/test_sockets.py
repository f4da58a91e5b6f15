"""A locally started pool listens on loopback only: every TCP port that Ray's processes
(GCS, raylet, agents, workers) open for listening is bound to 127.0.0.0/8 or ::1.

Ray's processes are the descendants of this test process (ray.init starts GCS and
raylet, the raylet starts agents and workers), so Ray instances of other programs on the
machine are not looked at. Sockets come from psutil when installed, else from `ss`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dogma_evolve.evaluation import EvaluationPool

ray = pytest.importorskip("ray")

try:
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

pytestmark = pytest.mark.skipif(
    psutil is None and shutil.which("ss") is None,
    reason="listing listening sockets needs psutil or ss (iproute2)",
)


def descendants(root: int) -> dict[int, str]:
    """pid -> process name for every process below ``root``."""
    if psutil is not None:
        return {p.pid: p.name() for p in psutil.Process(root).children(recursive=True)}
    parent, name = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        pid, rest = int(text[: text.index(" ")]), text[text.rindex(")") + 2 :]
        parent[pid] = int(rest.split()[1])
        name[pid] = text[text.index("(") + 1 : text.rindex(")")]
    found, frontier = {}, [root]
    while frontier:
        current = frontier.pop()
        for pid, ppid in parent.items():
            if ppid == current and pid not in found:
                found[pid] = name[pid]
                frontier.append(pid)
    return found


def listening_tcp(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address) of every listening TCP socket held by one of ``pids``."""
    if psutil is not None:
        out = []
        for pid in pids:
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out += [(pid, c.laddr.ip) for c in connections if c.status == psutil.CONN_LISTEN]
        return out
    lines = subprocess.run(
        ["ss", "-ltnpH"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            continue
        host = fields[3].rsplit(":", 1)[0].strip("[]").split("%")[0]  # [addr]:port, addr%if
        out += [(int(pid), host) for pid in re.findall(r"pid=(\d+)", line) if int(pid) in pids]
    return out


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # [::ffff:127.0.0.1]
    return (mapped or address).is_loopback


def test_is_loopback_reads_every_spelling():
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.1", "::1", "::ffff:127.0.0.1"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.0.2.2", "::ffff:10.0.0.1"]))


def test_a_local_pool_listens_on_loopback_only():
    with EvaluationPool(workers=1) as pool:
        # A worker process too: a task, besides the heartbeat actor the pool starts.
        worker_pid = ray.remote(num_cpus=1)(lambda: os.getpid())  # by value: no test import
        assert ray.get(worker_pid.remote(), timeout=120) != os.getpid()
        assert pool.slots == 1
        processes = descendants(os.getpid())
        sockets = listening_tcp(set(processes))
    names = {processes[pid] for pid, _ in sockets}
    # Not vacuous: the servers we mean to check were found and do listen.
    assert {"gcs_server", "raylet"} <= names, sorted(names)
    exposed = sorted({(processes[pid], host) for pid, host in sockets if not is_loopback(host)})
    assert exposed == [], f"listening beyond loopback: {exposed}"
