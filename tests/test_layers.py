"""The layering of the project's packages, read from the source with ``ast`` (nothing imported).

The six packages are layers, lowest first: ``genome``, ``kernels`` and ``store`` stand on
nothing of the project; ``phenotype`` on genome and kernels; ``evaluation`` on those and
store; ``evolution`` on all five. These tests keep it so:

* no import runs up the layers, whether it runs when its module is imported or only when a
  function that holds it is called;
* no modules import each other in a circle when they are imported;
* counting the imports inside functions too, no circle spans more than three modules;
* no package folder holds more than twenty modules, except the registries that keep one
  module per kind (``genome/kinds``, ``phenotype/blocks``).

How an import is read
    Every import statement counts, wherever it is, except under ``if TYPE_CHECKING:``
    (never run; its ``else`` branch does run). It is *deferred* when it sits in a function
    or method body: it runs when the function is called, not when its module is imported.
    All others (module body, ``if`` / ``try`` / ``with`` / loop blocks, class bodies) run at
    import. ``from pkg import name`` imports ``pkg`` (its ``__init__`` runs and ``name`` is
    looked up there) and, where ``pkg.name`` is a module, that module too; relative imports
    are resolved against the importing module's package. A name that is no module stands
    for the module that defines it (``store.Store``: ``store``). Implicit imports of parent
    packages (``import a.b`` runs ``a/__init__``) are not counted: every module would then
    sit in a circle with its package's ``__init__``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The one import name the six packages install under (``dogma_evolve.genome``, ...).
NAMESPACE = "dogma_evolve"

#: Each package, lowest layer first, and the other project packages it may import.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "genome": frozenset(),
    "kernels": frozenset(),
    "store": frozenset(),
    "phenotype": frozenset({"genome", "kernels"}),
    "evaluation": frozenset({"genome", "kernels", "phenotype", "store"}),
    "evolution": frozenset({"genome", "kernels", "phenotype", "evaluation", "store"}),
}
PACKAGES = tuple(MAY_IMPORT)
#: The most modules a circle may span when imports inside functions count.
MAX_CIRCLE_WITH_DEFERRED = 3
#: The most modules one package folder may hold (its ``__init__.py`` included).
MAX_MODULES_PER_FOLDER = 20
#: Folders of one module per kind: they grow with the kinds and are exempt from the limit.
REGISTRIES = frozenset({"genome/kinds", "phenotype/blocks"})

Graph = Mapping[str, Mapping[str, list["Import"]]]  # source -> target -> the imports making it


@dataclass(frozen=True)
class Module:
    """A module of the project: ``name`` dotted (a package is named by its folder)."""

    name: str
    path: Path

    @property
    def package(self) -> str:
        """The top-level package: ``store`` for ``store.migrations.env``."""
        return self.name.split(".")[0]

    @property
    def home(self) -> list[str]:
        """The package a relative import starts from: the module itself for a package's
        ``__init__``, else the package that holds it."""
        parts = self.name.split(".")
        return parts if self.path.name == "__init__.py" else parts[:-1]


@dataclass(frozen=True)
class Import:
    """One name an import statement of ``source`` imports (resolved, absolute)."""

    source: Module
    target: str
    line: int
    deferred: bool  # in a function or method: runs when it is called, not at import

    @property
    def package(self) -> str:
        return self.target.split(".")[0]

    def where(self, root: Path) -> str:
        place = f"{self.source.path.relative_to(root)}:{self.line}"
        return f"{place}, inside a function" if self.deferred else place


# -- reading the source ------------------------------------------------------------------------


def find_modules(root: Path) -> dict[str, Module]:
    """Every ``.py`` file of the six packages under ``root``, by dotted name."""
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = Module(".".join(parts), path)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


class _ImportReader(ast.NodeVisitor):
    """Collects the project imports of one module (see the module docstring for the rules)."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.imports: list[Import] = []
        self.bare: list[Import] = []  # absolute imports of a package without the namespace
        self._functions = 0  # how many function bodies the visit is inside

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._found(alias.name, node, absolute=True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node)
        if base is None:
            return
        absolute = node.level == 0
        self._found(base, node, absolute)
        for alias in node.names:
            if alias.name != "*":
                self._found(f"{base}.{alias.name}", node, absolute)

    def _absolute(self, node: ast.ImportFrom) -> str | None:
        """The module a ``from ... import`` names, relative dots resolved (None: a relative
        import that climbs out of the top-level package, which Python refuses too)."""
        if node.level == 0:
            return node.module
        home = self.module.home
        if node.level > len(home):
            return None
        anchor = home[: len(home) - node.level + 1]
        return ".".join([*anchor, node.module] if node.module else anchor)

    def _found(self, target: str, node: ast.stmt, absolute: bool) -> None:
        """Record a project import under the package's own name (``dogma_evolve.store.x``:
        ``store.x``); an absolute one without the namespace goes to ``bare``."""
        inside = target.removeprefix(f"{NAMESPACE}.") if absolute else target
        if inside.split(".")[0] not in MAY_IMPORT:
            return
        found = Import(self.module, inside, node.lineno, self._functions > 0)
        (self.bare if absolute and inside == target else self.imports).append(found)


def read_imports(module: Module) -> list[Import]:
    """The project imports of ``module``, in source order."""
    return _read(module).imports


def read_bare_imports(module: Module) -> list[Import]:
    """The absolute imports of ``module`` that name a package without ``dogma_evolve.``."""
    return _read(module).bare


@cache
def _read(module: Module) -> _ImportReader:
    reader = _ImportReader(module)
    reader.visit(ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path)))
    return reader


def resolve(target: str, modules: Mapping[str, Module]) -> str | None:
    """The module an imported name stands for: the name itself, or the module that defines
    it (``store.Store``: ``store``); None when neither is a module of the project."""
    if target in modules:
        return target
    parent = target.rpartition(".")[0]
    return parent if parent in modules else None


def import_graph(imports: Iterable[Import], modules: Mapping[str, Module], *, deferred: bool) -> Graph:
    """Which module imports which, with the imports that say so; ``deferred``: count the
    imports inside functions too."""
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for found in imports:
        target = resolve(found.target, modules)
        if target is not None and target != found.source.name and (deferred or not found.deferred):
            graph[found.source.name][target].append(found)
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (modules that all reach
    each other through imports), each sorted, largest first. Quadratic in the modules, which
    is nothing for a project of a few hundred."""
    reach = {node: _reachable(graph, node) for node in graph}
    components = {
        frozenset({node} | {other for other in reach[node] if node in reach.get(other, ())}) for node in graph
    }
    return sorted((sorted(c) for c in components if len(c) > 1), key=lambda c: (-len(c), c))


def _reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


# -- what the tree holds (read once per test session) --------------------------------------------


@cache
def project() -> tuple[dict[str, Module], tuple[Import, ...]]:
    modules = find_modules(ROOT)
    return modules, tuple(found for module in modules.values() for found in read_imports(module))


def _describe(circle: list[str], graph: Graph, root: Path) -> str:
    """A circle and the import statements that close it, one edge a line."""
    members = set(circle)
    edges = [
        f"    {source} -> {target}  ({_places(graph[source][target], root)})"
        for source in circle
        for target in sorted(graph.get(source, ()))
        if target in members
    ]
    return f"  {len(circle)} modules: {', '.join(circle)}\n" + "\n".join(edges)


def _places(imports: Iterable[Import], root: Path) -> str:
    """Where the statements are, each once (a statement importing two names is one place)."""
    return ", ".join(dict.fromkeys(i.where(root) for i in imports))


# -- the rules -----------------------------------------------------------------------------------


def test_every_package_is_read() -> None:
    modules, imports = project()
    assert {m.package for m in modules.values()} == set(PACKAGES)
    assert any(i.source.package == "evolution" and i.package == "store" for i in imports)


def test_nothing_imports_a_package_by_its_bare_name() -> None:
    """Our packages import as ``dogma_evolve.<package>`` only: a bare ``kernels`` or ``store``
    is another distribution's in a user's environment (Hugging Face's ``kernels``). Checked in
    the packages and in the tests, benchmarks and examples (a store fixture's old plugin file,
    kept byte for byte, aside)."""
    modules, _ = project()
    found = [i for module in modules.values() for i in read_bare_imports(module)]
    for folder in ("tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "fixtures" not in path.parts:
                found += read_bare_imports(Module(path.relative_to(ROOT).with_suffix("").as_posix(), path))
    assert not found, "\n".join(f"{i.where(ROOT)}: {i.target}" for i in found)


def test_no_import_runs_up_the_layers() -> None:
    modules, imports = project()
    upward = {
        f"  {i.source.name} -> {resolve(i.target, modules) or i.target}  ({i.where(ROOT)}): "
        f"{i.source.package} may import "
        + (", ".join(sorted(MAY_IMPORT[i.source.package])) or "no other project package"): None
        for i in imports
        if i.package != i.source.package and i.package not in MAY_IMPORT[i.source.package]
    }
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_circle_of_imports_run_at_import_time() -> None:
    modules, imports = project()
    graph = import_graph(imports, modules, deferred=False)
    found = circles(graph)
    assert not found, "modules that import each other at import time:\n" + "\n".join(
        _describe(c, graph, ROOT) for c in found
    )


def test_no_circle_through_imports_inside_functions_spans_more_than_three_modules() -> None:
    modules, imports = project()
    graph = import_graph(imports, modules, deferred=True)
    found = [c for c in circles(graph) if len(c) > MAX_CIRCLE_WITH_DEFERRED]
    assert not found, (
        f"circles of more than {MAX_CIRCLE_WITH_DEFERRED} modules, imports inside functions counted:\n"
        + "\n".join(_describe(c, graph, ROOT) for c in found)
    )


def test_no_package_folder_holds_more_than_twenty_modules() -> None:
    modules, _ = project()
    per_folder: dict[Path, int] = defaultdict(int)
    for module in modules.values():
        per_folder[module.path.parent] += 1
    crowded = [
        f"  {folder.relative_to(ROOT)}/ holds {count} modules"
        for folder, count in sorted(per_folder.items())
        if count > MAX_MODULES_PER_FOLDER
        and (folder / "__init__.py").exists()  # a package (migration versions are none)
        and folder.relative_to(ROOT).as_posix() not in REGISTRIES
    ]
    assert not crowded, f"package folders of more than {MAX_MODULES_PER_FOLDER} modules:\n" + "\n".join(
        crowded
    )


# -- the reading itself, on a made-up tree -------------------------------------------------------


def test_the_reader_counts_imports_as_the_rules_say(tmp_path: Path) -> None:
    sources = {
        "store/__init__.py": "from dogma_evolve.store.api import Store\n",
        "store/api.py": "from dogma_evolve.store import rows\nfrom . import keys\n",
        "store/rows.py": "",
        "store/keys.py": "from .rows import *\n",
        "store/sub/__init__.py": "from .. import keys\n",
        "store/sub/deep.py": "from ..rows import thing\nfrom ... import beyond_the_top\n",
        "genome/__init__.py": "",
        "genome/core.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    import dogma_evolve.evolution.engine\n"
            "else:\n    import dogma_evolve.kernels\n"
            "try:\n    import dogma_evolve.phenotype.model\nexcept ImportError:\n    pass\n"
            "class A:\n    import dogma_evolve.store.keys\n"
            "def f():\n    with open('x'):\n        from dogma_evolve.evolution import engine\n"
        ),
        "kernels/__init__.py": "",
        "phenotype/__init__.py": "",
        "phenotype/model.py": "import kernels\nfrom store import keys\n",  # the old bare names
        "evaluation/__init__.py": "",
        "evolution/__init__.py": "",
        "evolution/engine.py": "import dogma_evolve.genome.core\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = find_modules(tmp_path)
    read = {
        (i.source.name, i.target, i.deferred) for module in modules.values() for i in read_imports(module)
    }
    assert read == {
        ("store", "store.api", False),
        ("store", "store.api.Store", False),
        ("store.api", "store", False),
        ("store.api", "store.rows", False),
        ("store.api", "store.keys", False),
        ("store.keys", "store.rows", False),
        ("store.sub", "store", False),  # `from .. import keys` in store/sub/__init__.py
        ("store.sub", "store.keys", False),
        ("store.sub.deep", "store.rows", False),
        ("store.sub.deep", "store.rows.thing", False),
        ("genome.core", "kernels", False),  # the else of TYPE_CHECKING runs
        ("genome.core", "phenotype.model", False),
        ("genome.core", "store.keys", False),  # a class body runs at import
        ("genome.core", "evolution", True),  # in a function: deferred
        ("genome.core", "evolution.engine", True),
        ("evolution.engine", "genome.core", False),
    }
    bare = {(i.source.name, i.target) for module in modules.values() for i in read_bare_imports(module)}
    assert bare == {
        ("phenotype.model", "kernels"),
        ("phenotype.model", "store"),
        ("phenotype.model", "store.keys"),
    }
    imports = [i for module in modules.values() for i in read_imports(module)]
    assert circles(import_graph(imports, modules, deferred=False)) == [["store", "store.api"]]
    assert circles(import_graph(imports, modules, deferred=True)) == [
        ["evolution.engine", "genome.core"],
        ["store", "store.api"],
    ]
