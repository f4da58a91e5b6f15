"""Loading a plugin inside a test, and forgetting it after (registries are process-wide)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dogma_evolve.genome import KINDS
from dogma_evolve.phenotype import REGISTRY, plugins

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextlib.contextmanager
def loaded_plugin(module: str, folder: Path = EXAMPLES) -> Iterator[dict[str, Any]]:
    """``phenotype.plugins.load(module)`` with ``folder`` on ``sys.path``; its record. On
    exit its kinds, blocks, module and record are removed, so later tests see the built-ins."""
    sys.path.insert(0, str(folder))
    try:
        yield plugins.load(module)
    finally:
        sys.path.remove(str(folder))
        record = plugins._loaded.pop(module, None)
        for kind in record["kinds"] if record else plugins.kinds_of(module):
            KINDS.pop(kind, None)
            REGISTRY.pop(kind, None)
        sys.modules.pop(module, None)
