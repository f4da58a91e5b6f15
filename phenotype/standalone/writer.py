"""Write a phenotype as `dogma_model/`, a self-contained, trainable Python package.

    dogma_model/
      __init__.py          load() -> the trained nn.Module (standalone_template/__init__.py)
      config.json          the config tree the genome decoded to (block configs, as JSON)
      model.safetensors    the weights
      model.py config.py registry.py blocks/...   copied from phenotype/
      kernels/...          the reference kernels, when a block needs one
      _genome.py           stands in for the two names the copied modules import from genome

The model is rebuilt from its config tree (`phenotype.config.ModelConfig`, frozen
dataclasses of plain values), not from the genome: the package needs no gene specs, no
YAML, no pickle. The code is DOGMA's own, copied rather than rewritten, so the package's
forward and `step` are the phenotype's: the walker (`phenotype/model.py`), the config tree
(`phenotype/config.py`), and the block modules the tree names, closed over their imports.
Imports of our packages become relative ones (`phenotype.X` -> the package's `X`,
`kernels.X` -> its `kernels.X`, `genome.*` -> `_genome`). Of `kernels/`, each op's
dispatcher and reference implementation are copied; `kernels/_dispatch.py` is replaced by
one that always picks the reference, and the fast paths (Triton, the C++ CPU loop) are
left out, their lazy imports rewritten into `raise ImportError`. Any other import of our
packages, of triton, or of a third-party package besides torch and safetensors stops the
export with the module and line, so a block that grows such a dependency is caught here.

A plugin's block (`dogma_evolve.phenotype.plugins`: a user's top-level module that registers kinds) is
carried the same way: its file is copied as `plugins/<module>.py`, its imports of ours made
relative (its `register_kind(KindSpec(...))` and param helpers go to the stub, which accepts
and ignores them), and the same refusals apply, naming the plugin's module and line. A plugin
that is a package's submodule, or has no source file, is refused by name.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import torch

from dogma_evolve import phenotype
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import DogmaModel
from dogma_evolve.phenotype.blocks.base import BlockConfig
from dogma_evolve.phenotype.weights import save_weights

PACKAGE = "dogma_model"
FORMAT = "dogma_model/1"  # the template's FORMAT
TEMPLATES = Path(__file__).with_name("template")
SOURCE_ROOT = Path(phenotype.__file__ or "").resolve().parents[1]

NAMESPACE = "dogma_evolve"  # our packages import as dogma_evolve.<package>
OURS = ("genome", "phenotype", "kernels", "evolution", "evaluation", "store")
ALLOWED_THIRD_PARTY = ("torch", "safetensors")
FAST_PATHS = ("triton", "cpu", "_build")  # kernels/<op>/triton.py, cpu.py; kernels/_build.py
ROOTS = ("phenotype.model", "phenotype.config", "phenotype.registry", "phenotype.blocks")
PLUGINS = "plugins"  # the package folder a plugin's module is copied into
TEMPLATED = {"kernels._dispatch": "_dispatch.py"}  # project module -> template file


class StandaloneError(RuntimeError):
    """The phenotype's code cannot be made standalone (an import the package cannot carry)."""


def _internal(module: str) -> str:
    """`dogma_evolve.phenotype.model` -> `phenotype.model`: the writer names our modules
    within the namespace (as the package's config.json has always listed them); any other
    module name is returned as it is."""
    return module.removeprefix(NAMESPACE + ".")


# -- the config tree as JSON --------------------------------------------------------------
def config_json(node: Any) -> Any:
    """A config tree as JSON: a dataclass of ours -> {"class": "module:Class", "fields"},
    a tuple -> a list; plain values as they are. `dogma_model._build` inverts it."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        module = _internal(type(node).__module__)
        if not module.startswith("phenotype.") and not _is_plugin(module):
            raise StandaloneError(f"config class {type(node).__qualname__} is not phenotype's ({module})")
        return {
            "class": f"{_target(module)}:{type(node).__qualname__}",
            "fields": {
                f.name: config_json(getattr(node, f.name)) for f in dataclasses.fields(node) if f.init
            },
        }
    if isinstance(node, tuple | list):
        return [config_json(item) for item in node]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise StandaloneError(f"config value of type {type(node).__name__} has no JSON form: {node!r}")


def config_modules(node: Any) -> set[str]:
    """The phenotype modules whose classes a config tree is made of."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        found = {_internal(type(node).__module__)}
        for f in dataclasses.fields(node):
            found |= config_modules(getattr(node, f.name))
        return found
    if isinstance(node, tuple | list):
        return set().union(*(config_modules(item) for item in node))
    return set()


def block_kinds(node: Any) -> list[str]:
    """The gene kinds of the blocks in a config tree."""
    kinds: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, BlockConfig):
            kinds.add(node.kind)
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name))
        elif isinstance(node, tuple | list):
            for item in node:
                walk(item)

    walk(node)
    return sorted(kinds)


# -- modules: where they are, what they import ----------------------------------------------
def _is_plugin(module: str) -> bool:
    """Whether `module` is a user's module that registered a block (`dogma_evolve.phenotype.plugins`)."""
    from dogma_evolve.phenotype.blocks.base import REGISTRY

    return module.split(".")[0] not in OURS and any(
        spec.config.__module__ == module for spec in REGISTRY.values()
    )


def _plugin_source(module: str) -> Path:
    """The file of a plugin's module: a top-level module with a `.py` source (one file the
    package can carry), else a StandaloneError naming the plugin."""
    found = sys.modules.get(module)
    file = getattr(found, "__file__", None)
    if "." in module or getattr(found, "__path__", None) is not None:
        raise StandaloneError(f"plugin {module}: only a one-file top-level plugin module can be exported")
    if not file or not file.endswith(".py") or not Path(file).is_file():
        raise StandaloneError(f"plugin {module}: no source file to copy into the package")
    return Path(file)


def _source(module: str) -> tuple[Path, bool]:
    """The source file of one of our modules (or of a plugin's) and whether it is a
    package's `__init__`."""
    if module.split(".")[0] not in OURS and _is_plugin(module):
        return _plugin_source(module), False
    base = SOURCE_ROOT.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    raise StandaloneError(f"no source for module {module} under {SOURCE_ROOT}")


def _is_module(module: str) -> bool:
    base = SOURCE_ROOT.joinpath(*module.split("."))
    return (base / "__init__.py").is_file() or base.with_suffix(".py").is_file()


def _target(module: str) -> str | None:
    """Where one of our modules lives in the package (dotted, "" the package itself), or
    None for a kernel fast path, which stays behind."""
    top, _, rest = module.partition(".")
    if top not in OURS and _is_plugin(module):
        return f"{PLUGINS}.{module}"
    if top == "genome":
        return "_genome"
    if top == "phenotype":
        return rest
    if top == "kernels":
        if module.rsplit(".", 1)[-1] in FAST_PATHS:
            return None
        return module
    raise StandaloneError(f"module {module} cannot be part of a standalone package")


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ImportFrom in `module` imports from."""
    if not node.level:
        return _internal(node.module or "")
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[tuple[ast.stmt, list[str]]]:
    """Every import statement of ours in a module, with the modules of ours it loads
    (a `from P import name` loads P, and P.name when that is a submodule)."""
    out: list[tuple[ast.stmt, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [_internal(a.name) for a in node.names if _internal(a.name).split(".")[0] in OURS]
            if names and len(names) != len(node.names):
                raise StandaloneError(f"{module}:{node.lineno}: mixes our imports with others")
            if names:
                out.append((node, names))
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(node, module, is_package)
            if source.split(".")[0] not in OURS:
                continue
            loads = [source] + [f"{source}.{a.name}" for a in node.names if _is_module(f"{source}.{a.name}")]
            out.append((node, loads))
    return out


def _third_party(tree: ast.Module, module: str) -> None:
    """Refuse imports of anything but the standard library, torch and safetensors."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [_internal(a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            tops = [_internal(node.module or "").split(".")[0]]
        else:
            continue
        for top in tops:
            if top not in OURS and top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                raise StandaloneError(
                    f"{module}:{node.lineno}: imports {top}, which the package cannot carry"
                )


# -- rewriting imports ---------------------------------------------------------------------
def _relative(importer: str, is_package: bool, target: str) -> tuple[int, str]:
    """(level, module) of the shortest relative import of package module `target` from
    `importer` (both dotted within the package; "" the package itself)."""
    here = importer.split(".") if importer else []
    if not is_package:
        here = here[:-1]
    there = target.split(".") if target else []
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return len(here) - common + 1, ".".join(there[common:])


def _fast_path_raise(module: str) -> str:
    return f'raise ImportError("{module} is a fast path: this package carries the reference only")'


def _rewrite_import(
    node: ast.stmt, module: str, is_package: bool, where: str, stub_names: set[str], tree: ast.Module
) -> str:
    """The replacement source of one import statement of ours (no indentation)."""
    here = _target(module) or ""
    if isinstance(node, ast.Import):
        if len(node.names) != 1:
            raise StandaloneError(f"{where}: import one module of ours per statement")
        alias = node.names[0]
        name = _internal(alias.name)
        parts = name.split(".")
        target = _target(name)
        if target is None:
            return _fast_path_raise(name)
        bound = alias.asname or parts[-1]
        if alias.asname is None and "." in alias.name:  # `import a.b` binds `a`: used by name?
            if any(isinstance(n, ast.Name) and n.id == alias.name.split(".")[0] for n in ast.walk(tree)):
                raise StandaloneError(f"{where}: `import {alias.name}` is used by name; import from it")
        parent, _, last = target.rpartition(".")
        level, mod = _relative(here, is_package, parent)
        imported = ast.alias(last) if bound == last else ast.alias(last, bound)
        return ast.unparse(ast.ImportFrom(module=mod or None, names=[imported], level=level))
    assert isinstance(node, ast.ImportFrom)
    source = _resolve(node, module, is_package)
    names = [a.name for a in node.names]
    submodules = [n for n in names if _is_module(f"{source}.{n}")]
    if any(_target(f"{source}.{n}") is None for n in submodules):
        if len(names) != 1:
            raise StandaloneError(f"{where}: imports a fast path together with other names")
        return _fast_path_raise(f"{source}.{names[0]}")
    target = _target(source)
    if target is None:
        raise StandaloneError(f"{where}: imports from fast path {source}")
    if target == "_genome":
        missing = set(names) - stub_names
        if missing:
            raise StandaloneError(f"{where}: imports {', '.join(sorted(missing))} from genome")
    if target == "" and set(names) - set(submodules):
        raise StandaloneError(f"{where}: imports from phenotype/__init__.py, which is not copied")
    level, mod = _relative(here, is_package, target)
    return ast.unparse(ast.ImportFrom(module=mod or None, names=node.names, level=level))


def rewrite(module: str, text: str, stub_names: set[str]) -> str:
    """`module`'s source with every import of ours made relative to the package."""
    module = _internal(module)
    _, is_package = _source(module)
    tree = ast.parse(text)
    _third_party(tree, module)
    lines = text.splitlines(keepends=True)
    edits = []
    for node, _ in _imports(tree, module, is_package):
        where = f"{module}:{node.lineno}"
        end = node.end_lineno or node.lineno
        indent, tail = lines[node.lineno - 1][: node.col_offset], lines[end - 1][node.end_col_offset or 0 :]
        if indent.strip() or tail.split("#")[0].strip():  # `x = 1; import y`, `import y; x = 1`
            raise StandaloneError(f"{where}: an import shares its line with other statements")
        new = _rewrite_import(node, module, is_package, where, stub_names, tree)
        edits.append((node.lineno, end, indent + new + tail.rstrip("\n") + "\n"))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1 : end] = [new]
    return "".join(lines)


def needed_modules(model_cfg: Any) -> list[str]:
    """Our modules the package copies for this config tree: the walker, the config tree's
    classes' modules, and everything they import of ours, fast paths and genome aside."""
    todo = list(ROOTS) + sorted(config_modules(model_cfg))
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module in TEMPLATED or module == "phenotype" or module.split(".")[0] == "genome":
            continue  # a template, the package's own __init__ (the loader), the stub
        path, is_package = _source(module)
        for _, loads in _imports(ast.parse(path.read_text()), module, is_package):
            for loaded in loads:
                if _target(loaded) is not None:
                    todo.append(loaded)
                    parent = loaded.rpartition(".")[0]  # its packages' __init__ run first
                    while parent and parent not in ("phenotype", "genome"):
                        todo.append(parent)
                        parent = parent.rpartition(".")[0]
    return sorted(m for m in seen if m != "phenotype" and m.split(".")[0] != "genome")


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _package_path(root: Path, target: str, is_package: bool) -> Path:
    parts = target.split(".") if target else []
    return root.joinpath(*parts, "__init__.py") if is_package else root.joinpath(*parts).with_suffix(".py")


# -- the package -----------------------------------------------------------------------------
def write_package(model: DogmaModel, genome: Genome, out_dir: str | Path) -> dict[str, Any]:
    """Write `out_dir/dogma_model/` for a phenotype (its code, config tree, weights).
    Returns the package's path, the modules copied and the block kinds it holds."""
    root = Path(out_dir) / PACKAGE
    if root.exists():
        raise StandaloneError(f"{root} exists")
    stub = TEMPLATES / "_genome.py"
    stub_names = _top_level_names(stub)
    modules = needed_modules(model.cfg)
    root.mkdir(parents=True)
    try:
        shutil.copyfile(TEMPLATES / "__init__.py", root / "__init__.py")
        shutil.copyfile(stub, root / "_genome.py")
        if any(m.startswith(PLUGINS + ".") for m in map(_target, modules) if m):
            (root / PLUGINS).mkdir()
            (root / PLUGINS / "__init__.py").write_text(
                '"""A user\'s block kinds, copied (phenotype.plugins)."""\n'
            )
        for module in modules:
            target = _target(module)
            assert target is not None, module
            if module in TEMPLATED:
                dest = _package_path(root, target, False)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(TEMPLATES / TEMPLATED[module], dest)
                continue
            path, is_package = _source(module)
            dest = _package_path(root, target, is_package)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(rewrite(module, path.read_text(), stub_names))
        document = {
            "format": FORMAT,
            "genome_id": genome.id,
            "sequence": genome.sequence_view(),
            "modules": modules,
            "model": config_json(model.cfg),
        }
        (root / "config.json").write_text(json.dumps(document, indent=1) + "\n")
        save_weights(model, root / "model.safetensors")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return {"package": str(root), "modules": modules, "kinds": block_kinds(model.cfg)}


def check_package(package: str | Path, ids: torch.Tensor, expected: torch.Tensor) -> float:
    """Import a written package under a private name, `load()` it and run `ids` through
    it; StandaloneError unless its logits equal `expected` (the phenotype's, up to the
    kernels' float rounding: the phenotype may have run a fast path). Returns the largest
    absolute difference."""
    root = Path(package)
    name = f"_dogma_model_check_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the export
    try:
        spec.loader.exec_module(module)
        model = module.load()
        with torch.no_grad():
            got = model(ids)
    finally:
        sys.dont_write_bytecode = bytecode
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
    if got.shape != expected.shape:
        raise StandaloneError(f"{root}: logits of shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    diff = float((got - expected).abs().max())
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
        raise StandaloneError(f"{root}: logits differ from the phenotype's by up to {diff:.3g}")
    return diff
