"""Test-session settings that must hold before anything imports triton or starts Ray."""

from __future__ import annotations

import os
import shutil

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
