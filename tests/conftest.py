"""Test-session settings that must hold before anything imports triton or starts Ray."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

# Triton kernels run on CPU only in interpreter mode, and the variable is read when triton
# is imported: set it here, before any test module imports kernels. A GPU keeps real kernels.
if not (shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES")):
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# One intra-op thread: the suite runs models far too small to gain from two, and OpenMP
# threads spinning against Ray workers and subprocesses on 2 cores cost 10x (measured).
os.environ.setdefault("OMP_NUM_THREADS", "1")


# Under pytest the repository root is on `sys.path` (tests/ is a package): `import dogma_evolve`
# (below, before any test module) puts its `NotOurFolders` finder first, so a bare `kernels`
# resolves as in a user's process (Hugging Face's, or nothing), never to our folder.
import dogma_evolve  # noqa: E402, F401

# The suite runs on two processes, a module's tests on one (`--dist loadscope`). Modules are
# handed out in collection order, so the longest go first (longest-processing-time first): a
# 2-minute module collected last would otherwise run alone at the end while the other process
# idles. Seconds per module come from `module_durations.json`, written by a run with
# `--record-durations` (`make durations`); a module not in it counts as the median.
DURATIONS_FILE = Path(__file__).with_name("module_durations.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write this run's seconds per test module to {DURATIONS_FILE.name}",
    )


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds: dict[str, float] = json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}
    default = statistics.median(seconds.values()) if seconds else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_module(item.nodeid), len(first_seen))
    # a stable sort: a module's tests keep their order and stay together
    items.sort(
        key=lambda item: (
            -seconds.get(_module(item.nodeid), default),
            first_seen[_module(item.nodeid)],
        )
    )


_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = _module(report.nodeid)
    _spent[module] = _spent.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    # under xdist only the controller (no `workerinput`) sees every module's reports
    if session.config.getoption("record_durations") and not hasattr(session.config, "workerinput"):
        ordered = dict(sorted(_spent.items(), key=lambda kv: -kv[1]))
        rounded = {module: round(spent, 1) for module, spent in ordered.items()}
        DURATIONS_FILE.write_text(json.dumps(rounded, indent=1) + "\n")
