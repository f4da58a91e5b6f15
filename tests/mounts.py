"""A real tmpfs of a test's own (a full or a read-only file system): mounting needs root.

Where ``mount`` is refused the test skips and says why, or fails where
``EVOLVE_REQUIRE_MOUNT`` is set (`.ci/run` sets it: CI runs as root and must not pass by
skipping).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRE_MOUNT_ENV = "EVOLVE_REQUIRE_MOUNT"


@contextlib.contextmanager
def tmpfs(point: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``point`` (made here) with ``options`` (e.g. ``size=8m`` or
    ``ro,size=64k``), unmounted after (lazily if a process is still in it)."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    why = "no mount program" if mount is None or umount is None else None
    if why is None:
        point.mkdir(parents=True)
        made = subprocess.run(
            [mount, "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True
        )
        if made.returncode != 0:
            why = (made.stderr.strip().splitlines()[-1:] or [f"exit {made.returncode}"])[0]
    if why is not None:
        reason = f"the test mounts a tmpfs of its own, which is not possible here: {why}"
        if os.environ.get(REQUIRE_MOUNT_ENV):
            pytest.fail(f"{reason}; {REQUIRE_MOUNT_ENV} is set", pytrace=False)
        pytest.skip(reason)
    try:
        yield point
    finally:
        if subprocess.run([umount, str(point)], capture_output=True).returncode != 0:
            subprocess.run([umount, "-l", str(point)], capture_output=True)
