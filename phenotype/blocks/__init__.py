"""The block catalogue: every module of this package is imported here, and each block's
config class registers itself under its gene kind (`base.REGISTRY`) as its module loads.

A new block module needs no entry anywhere: dropping it into this package registers it.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
