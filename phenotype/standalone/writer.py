"""Write a phenotype as `dogma_model/`, a self-contained, trainable Python package.

    dogma_model/
      __init__.py          load() -> the trained nn.Module (standalone_template/__init__.py)
      config.json          the config tree the genome decoded to (block configs, as JSON)
      model.safetensors    the weights
      model.py config.py registry.py blocks/...   copied from phenotype/
      kernels/...          the kernels a block needs: reference, C++ CPU and Triton paths
      _genome.py           stands in for the two names the copied modules import from genome

The model is rebuilt from its config tree (`phenotype.config.ModelConfig`, frozen
dataclasses of plain values), not from the genome: the package needs no gene specs, no
YAML, no pickle. The code is DOGMA's own, copied rather than rewritten, so the package's
forward and `step` are the phenotype's: the walker (`phenotype/model.py`), the config tree
(`phenotype/config.py`), and the block modules the tree names, closed over their imports.
Imports of our packages become relative ones (`phenotype.X` -> the package's `X`,
`kernels.X` -> its `kernels.X`, `genome.*` -> `_genome`). Of `kernels/`, every module an op
imports is copied, the dispatcher (`_dispatch.py`) and the fast paths with it, so the package
picks its backend as DOGMA does: the C++ CPU loop (built on first use; the reference, with one
warning, where no compiler or ninja is), the pure-PyTorch CPU loops, the Triton kernels on
CUDA where triton imports, the reference under `torch.export`/`torch.compile`. The C++
sources travel as text inside the copy of `kernels/_build.py` (its `EMBEDDED`), since a
Hugging Face directory carries Python modules only. Triton may be imported by a kernel module
only (the dispatchers import those lazily, where triton is installed); any other import of
our packages, of triton, or of a third-party package besides torch and safetensors stops the
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
from collections.abc import Callable
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
KERNEL_ONLY = ("triton",)  # what only a kernel module may import: its Triton paths, loaded lazily
ROOTS = ("phenotype.model", "phenotype.config", "phenotype.registry", "phenotype.blocks")
PLUGINS = "plugins"  # the package folder a plugin's module is copied into
BUILD = "kernels._build"  # its copy carries the C++ sources as text, in this line's place:
EMBEDDED_LINE = "EMBEDDED: dict[str, str] = {}\n"


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


def _target(module: str) -> str:
    """Where one of our modules lives in the package (dotted, "" the package itself)."""
    top, _, rest = module.partition(".")
    if top not in OURS and _is_plugin(module):
        return f"{PLUGINS}.{module}"
    if top == "genome":
        return "_genome"
    if top == "phenotype":
        return rest
    if top == "kernels":
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
    """Refuse imports of anything but the standard library, torch and safetensors (and, in a
    kernel module, triton)."""
    allowed = ALLOWED_THIRD_PARTY + (KERNEL_ONLY if module.split(".")[0] == "kernels" else ())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [_internal(a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            tops = [_internal(node.module or "").split(".")[0]]
        else:
            continue
        for top in tops:
            if top not in OURS and top not in sys.stdlib_module_names and top not in allowed:
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
    target = _target(source)
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
    classes' modules, and everything they import of ours, genome aside."""
    todo = list(ROOTS) + sorted(config_modules(model_cfg))
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module == "phenotype" or module.split(".")[0] == "genome":
            continue  # the package's own __init__ (the loader), the stub
        path, is_package = _source(module)
        for _, loads in _imports(ast.parse(path.read_text()), module, is_package):
            for loaded in loads:
                todo.append(loaded)
                parent = loaded.rpartition(".")[0]  # its packages' __init__ run first
                while parent and parent not in ("phenotype", "genome"):
                    todo.append(parent)
                    parent = parent.rpartition(".")[0]
    return sorted(m for m in seen if m != "phenotype" and m.split(".")[0] != "genome")


def embed_cpp_sources(build: str, modules: list[str]) -> str:
    """The copy of `kernels/_build.py` with `EMBEDDED` holding the text of every `.cpp` file
    beside the kernel modules copied (by file name, one entry a line of source)."""
    folders = sorted({SOURCE_ROOT.joinpath(*m.split(".")[:2]) for m in modules if m.startswith("kernels.")})
    sources = sorted(p for folder in folders if folder.is_dir() for p in folder.glob("*.cpp"))
    names = [p.name for p in sources]
    if len(set(names)) != len(names):
        raise StandaloneError(f"two C++ sources of one name: {names}")
    if build.count(EMBEDDED_LINE) != 1:
        raise StandaloneError(f"{BUILD} lacks the line {EMBEDDED_LINE.strip()!r}")
    entries = []
    for path in sources:
        lines = "".join(f"        {line!r}\n" for line in path.read_text().splitlines(keepends=True))
        entries.append(f"    {path.name!r}: (\n{lines}    ),\n")
    return build.replace(EMBEDDED_LINE, "EMBEDDED: dict[str, str] = {\n" + "".join(entries) + "}\n")


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
        if any(_target(m).startswith(PLUGINS + ".") for m in modules):
            (root / PLUGINS).mkdir()
            (root / PLUGINS / "__init__.py").write_text(
                '"""A user\'s block kinds, copied (phenotype.plugins)."""\n'
            )
        for module in modules:
            path, is_package = _source(module)
            dest = _package_path(root, _target(module), is_package)
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = rewrite(module, path.read_text(), stub_names)
            dest.write_text(embed_cpp_sources(text, modules) if module == BUILD else text)
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


def logits_match(where: Path, got: dict[str, torch.Tensor], expected: torch.Tensor) -> float:
    """StandaloneError unless each of an export's logits (by the kernels that gave them:
    "fast", the backends `auto` picks; "reference", under the package's `reference_only()`)
    equals `expected`, the phenotype's, up to the kernels' float rounding (the phenotype may
    have run another path). Returns the largest absolute difference."""
    diff = 0.0
    for path, logits in got.items():
        if logits.shape != expected.shape:
            shapes = f"{tuple(logits.shape)}, expected {tuple(expected.shape)}"
            raise StandaloneError(f"{where}: logits ({path} kernels) of shape {shapes}")
        diff = max(diff, float((logits - expected).abs().max()))
        if not torch.allclose(logits, expected, rtol=1e-4, atol=1e-4):
            raise StandaloneError(
                f"{where}: logits ({path} kernels) differ from the phenotype's by up to {diff:.3g}"
            )
    return diff


def run_both_paths(
    model: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, dispatch: Callable[[], Any]
) -> dict[str, torch.Tensor]:
    """An exported model's logits on `ids` with the kernels `auto` picks and, when it holds
    kernels (`dispatch`: its copy of `kernels._dispatch`, looked up after the first forward,
    which imports it), with the reference forced."""
    with torch.no_grad():
        got = {"fast": model(ids)}
        found = dispatch()
        if found is not None:
            with found.reference_only():
                got["reference"] = model(ids)
    return got


def check_package(package: str | Path, ids: torch.Tensor, expected: torch.Tensor) -> float:
    """Import a written package under a private name, `load()` it and run `ids` through
    it, with its kernels' fast paths and with their references (`logits_match`);
    StandaloneError unless both give `expected`. Returns the largest absolute difference."""
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
        got = run_both_paths(model, ids, lambda: sys.modules.get(f"{name}.kernels._dispatch"))
    finally:
        sys.dont_write_bytecode = bytecode
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
    return logits_match(root, got, expected)
