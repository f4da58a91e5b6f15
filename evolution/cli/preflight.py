"""Before a command runs: every module of ours must come from this distribution's own files.

The project once installed its packages as top-level `kernels`, `store`, ... and Hugging
Face's `kernels` (installed by transformers) took the name: candidates crashed on an
`AttributeError` and were recorded as bad genomes. Everything now lives under `dogma_evolve`;
what is left to go wrong is that name itself resolving to someone else's files (another
distribution that ships a `dogma_evolve`, a stale copy earlier on `sys.path`). `check()` finds
that before anything is trained or stored, and says it in one line naming both.

A module is ours when its file is one the installed `dogma-evolve` distribution records
(a wheel's RECORD) or lies under a folder its `.pth` files put on `sys.path` (an editable
install). Without an installed `dogma-evolve` (the code run from a bare checkout) there is
nothing to compare against and nothing is refused.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

DISTRIBUTION = "dogma-evolve"
NAMESPACE = "dogma_evolve"
PACKAGES = ("genome", "phenotype", "kernels", "evolution", "evaluation", "store")


def _roots(dist: importlib.metadata.Distribution) -> tuple[set[Path], list[Path]]:
    """The files `dist` installed, and the folders its `.pth` files add to `sys.path` (for a
    source tree's `.egg-info`, which setuptools writes beside the packages, that folder)."""
    files: set[Path] = set()
    folders: list[Path] = []
    info = getattr(dist, "_path", None)  # PathDistribution's metadata folder (no public name)
    if isinstance(info, Path) and info.name.endswith(".egg-info"):
        folders.append(info.parent.resolve())
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry))).resolve()
        files.add(path)
        if path.suffix == ".pth" and path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ")):
                    folders.append(Path(line).resolve())
    return files, folders


def _owner(path: Path, candidates: list[str]) -> str | None:
    """`name version` of the installed distribution among `candidates` that recorded `path`."""
    for name in candidates:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if path in _roots(dist)[0]:
            return f"{dist.metadata['Name']} {dist.version}"
    return None


def check() -> str | None:
    """One line naming the first module of ours that resolves to a file this distribution did
    not install, and whose file it is; None when every one is ours (or nothing is installed to
    compare with)."""
    installed = list(importlib.metadata.distributions(name=DISTRIBUTION))
    if not installed:
        return None
    ours = installed[0]
    files: set[Path] = set()
    folders: list[Path] = []
    for dist in installed:  # the editable install's dist-info and its source tree's egg-info
        more_files, more_folders = _roots(dist)
        files |= more_files
        folders += more_folders
    for name in (NAMESPACE, *(f"{NAMESPACE}.{p}" for p in PACKAGES)):
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if module is None or not where:
            continue
        # the file as sys.path reached it: an editable install's links are not resolved here,
        # since the .pth folder is what sys.path holds
        path = Path(where).absolute()
        if path.resolve() in files or any(path.is_relative_to(folder) for folder in folders):
            continue
        others = importlib.metadata.packages_distributions().get(NAMESPACE, [])
        owner = _owner(path.resolve(), [d for d in others if d.lower() != DISTRIBUTION])
        whose = f"of distribution {owner}" if owner else "that no installed distribution owns"
        return (
            f"{name} resolves to {path} ({whose}), not to {DISTRIBUTION} {ours.version}'s files: "
            f"remove the other copy or fix sys.path"
        )
    return None
