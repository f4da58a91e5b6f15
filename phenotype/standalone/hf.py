"""Write a phenotype as a Hugging Face model directory (transformers remote code).

    config.json              DogmaConfig: `auto_map` to the two files below, `dogma` the config
                             tree (the standalone package's config.json), vocab/width/length
    configuration_dogma.py   the `PreTrainedConfig` (hf_template/, copied as it is)
    modeling_dogma.py        `DogmaForCausalLM`: `PreTrainedModel` + `GenerationMixin`, with
                             an import line per flat module (what transformers copies)
    dogma_modules.py         the flattened modules' table and the config-tree builder
    dogma_*.py               the standalone package's modules, flattened (see below)
    model.safetensors        the weights, under `model.` (a shared region's once)

The model code is the standalone package's (`writer.write_package`: DOGMA's walker, config
tree and block modules, the kernels with their dispatcher and fast paths), flattened:
transformers copies a remote-code
model's modules only from the directory's top level, following `from .name import` lines,
so `blocks/attention.py` becomes `dogma_blocks_attention.py` and every import between them is
rewritten to name the flat module (`from ..kernels import wkv` -> `from .dogma_kernels import
wkv`; a module bound as a module, `from .. import kernels`, -> `from . import dogma_kernels
as kernels`). The Triton paths stay optional: the kernels import them only where triton is,
`modeling_dogma.py` names them under `if TYPE_CHECKING:` (copied, never imported), and their
own `import triton` lines sit in a `try` block, which transformers' requirement check skips
(it checks every module a Hub model names). Nothing here imports transformers;
`evolution.export` checks the directory with it.
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import DogmaModel
from dogma_evolve.phenotype.standalone.writer import PACKAGE, StandaloneError, write_package

TEMPLATES = Path(__file__).with_name("hf_template")
PREFIX = "dogma_"
OPTIONAL = ("triton",)  # what a flat module may import only where it is installed
AUTO_MAP = {
    "AutoConfig": "configuration_dogma.DogmaConfig",
    "AutoModelForCausalLM": "modeling_dogma.DogmaForCausalLM",
}


def flat_name(target: str) -> str:
    """The top-level module a package module becomes: `blocks.attention` -> `dogma_blocks_attention`."""
    return PREFIX + target.replace(".", "_")


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """The package's modules (dotted within it) -> (file, is a package's `__init__`); the
    package's own `__init__` (the standalone loader) is not one of them."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        target = ".".join(parts[:-1] if is_package else parts)
        if target:
            out[target] = (path, is_package)
    flats = [flat_name(t) for t in out]
    if len(set(flats)) != len(flats) or set(flats) & {"dogma_modules"}:
        raise StandaloneError(f"{root}: two modules flatten to one name: {sorted(flats)}")
    return out


def _bound(tree: ast.Module) -> set[str]:
    """The names a package's `__init__` binds at its top level (definitions, assignments,
    imports), its own submodules aside."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            continue  # `from . import sub` in a package's __init__ binds a submodule, no name of its own
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _rewrite_from(
    node: ast.ImportFrom, target: str, is_package: bool, modules: dict[str, Any], bound: dict[str, set[str]]
) -> list[str]:
    """The flat statements replacing one relative import of the package's module `target`."""
    base = target.split(".") if is_package else target.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    source = ".".join(base + ([node.module] if node.module else []))
    where = f"{target}:{node.lineno}"
    names, statements = [], []
    for alias in node.names:
        sub = f"{source}.{alias.name}" if source else alias.name
        # A submodule the package's `__init__` does not bind itself is imported as a module.
        if sub in modules and (not source or alias.name not in bound[source]):
            statements.append(f"from . import {flat_name(sub)} as {alias.asname or alias.name}")
        elif source in modules:
            names.append(alias.name if alias.asname is None else f"{alias.name} as {alias.asname}")
        else:
            raise StandaloneError(f"{where}: imports {alias.name} from {source or 'the package root'}")
    if names:
        statements.insert(0, f"from .{flat_name(source)} import {', '.join(names)}")
    return statements


def _registering_init(target: str, modules: dict[str, Any]) -> str:
    """A package `__init__` that imports its submodules by listing the directory (pkgutil,
    the block catalogue): flat, it imports the ones the export holds by name."""
    children = sorted(t for t in modules if t.rpartition(".")[0] == target)
    lines = [f"from . import {flat_name(t)}  # noqa: F401" for t in children]
    return f'"""Registers the {target} modules this model holds (the package listed its folder)."""\n\n' + (
        "\n".join(lines) + "\n"
    )


def _imports_optional(node: ast.stmt) -> bool:
    """Whether a statement imports an OPTIONAL package (`import triton`, `from triton import`)."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in OPTIONAL for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level:
        return (node.module or "").split(".")[0] in OPTIONAL
    return False


def _relative_sources(
    node: ast.ImportFrom, target: str, is_package: bool, modules: dict[str, Any]
) -> list[str]:
    """The package modules a relative import in module `target` loads."""
    base = target.split(".") if is_package else target.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    source = ".".join(base + ([node.module] if node.module else []))
    subs = [f"{source}.{a.name}" if source else a.name for a in node.names]
    return [m for m in [source, *subs] if m in modules]


def optional_modules(modules: dict[str, tuple[Path, bool]], trees: dict[str, ast.Module]) -> set[str]:
    """The modules that import an OPTIONAL package when they load: at their top level, or
    through a module they import at their top level (the Triton kernels and their wrappers;
    a dispatcher that imports them inside a function is not one)."""
    needs: dict[str, set[str]] = {}
    optional: set[str] = set()
    for target, tree in trees.items():
        needs[target] = set()
        for node in tree.body:
            if _imports_optional(node):
                optional.add(target)
            elif isinstance(node, ast.ImportFrom) and node.level:
                needs[target] |= set(_relative_sources(node, target, modules[target][1], modules))
    grew = True
    while grew:
        more = {t for t, loads in needs.items() if t not in optional and loads & optional}
        optional |= more
        grew = bool(more)
    return optional


def _in_try(statement: str) -> str:
    """A top-level OPTIONAL import in a `try` block that re-raises: the same import, which
    transformers' requirement check (`check_imports`, on every module of a Hub model) skips."""
    return (
        "try:  # optional: the kernels import this module only where it is installed\n"
        f"    {statement}\nexcept ImportError:\n    raise\n"
    )


def flatten(package: Path, out_dir: Path) -> tuple[list[str], list[str]]:
    """Write the package's modules as flat `dogma_*.py` files in out_dir. Returns their names
    and, of them, those that import triton when they load (`optional_modules`)."""
    modules = _modules(package)
    trees = {t: ast.parse(path.read_text()) for t, (path, _) in modules.items()}
    bound = {t: _bound(tree) for t, tree in trees.items() if modules[t][1]}
    for target, (path, is_package) in modules.items():
        tree = trees[target]
        imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        if is_package and "pkgutil" in imports:
            (out_dir / f"{flat_name(target)}.py").write_text(_registering_init(target, modules))
            continue
        lines = path.read_text().splitlines(keepends=True)
        edits = []
        for statement in tree.body:
            if _imports_optional(statement):
                end = statement.end_lineno or statement.lineno
                text = "".join(lines[statement.lineno - 1 : end]).strip()
                edits.append((statement.lineno, end, _in_try(text)))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            end = node.end_lineno or node.lineno
            indent = lines[node.lineno - 1][: node.col_offset]
            tail = lines[end - 1][node.end_col_offset or 0 :]
            if indent.strip() or tail.split("#")[0].strip():
                raise StandaloneError(f"{target}:{node.lineno}: an import shares its line")
            statements = _rewrite_from(node, target, is_package, modules, bound)
            new = "\n".join(indent + s for s in statements) + tail.rstrip("\n") + "\n"
            edits.append((node.lineno, end, new))
        for start, end, new in sorted(edits, reverse=True):
            lines[start - 1 : end] = [new]
        (out_dir / f"{flat_name(target)}.py").write_text("".join(lines))
    flats = sorted(flat_name(t) for t in modules)
    (out_dir / "dogma_modules.py").write_text(_modules_file(sorted(modules)))
    return flats, sorted(flat_name(t) for t in optional_modules(modules, trees))


MANIFEST_AFTER = "from .dogma_modules import build_config\n"  # the line of modeling_dogma.py


def manifest(flats: list[str], optional: Collection[str] = ()) -> str:
    """One `from .module import` line per flat module, for `modeling_dogma.py`: what
    transformers follows to copy a remote-code model's files (some versions only the modeling
    file's lines, not recursively; and the modules also import each other as modules, a form
    it does not follow). The `optional` ones (they import triton) are named under `if
    TYPE_CHECKING:`: copied all the same (transformers reads the lines as text), never
    imported here."""
    lines = [f"from .{f} import __name__ as _  # noqa: F401" for f in flats if f not in optional]
    text = (
        "\n# Every module of the model, named in the form transformers follows to copy a remote-code\n"
        "# model's files (the modules import one another as modules too, which it does not follow).\n"
        + "\n".join(lines)
        + "\n"
    )
    if optional:
        text += (
            "\n# The Triton paths: copied with the rest, imported by the kernels only where triton is.\n"
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            + "".join(f"    from .{f} import __name__ as _  # noqa: F401\n" for f in optional)
        )
    return text


def _modules_file(targets: list[str]) -> str:
    """`dogma_modules.py`: the flat modules' table and `build_config`, the standalone
    loader's `_build`."""
    table = "\n".join(f"    {t!r}: {flat_name(t)!r}," for t in targets)
    return f'''"""The model's code: DOGMA's modules, flattened into this directory by `evolve export
--format hf`, and `build_config`, which turns the config tree of config.json (`dogma.model`)
into the model's config objects (`build_config(tree).build()` is the network).
`modeling_dogma.py` names every module for transformers to copy."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

MODULES = {{
{table}
}}


def config_class(name: str) -> type[Any]:
    """A config dataclass of this model, from its `module:Class` name in config.json."""
    module, _, qualname = name.partition(":")
    if module not in MODULES or not qualname.isidentifier():
        raise ValueError(f"config.json names no class of this model: {{name!r}}")
    mod = importlib.import_module(f".{{MODULES[module]}}", __package__)
    cls = getattr(mod, qualname, None)
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls) or cls.__module__ != mod.__name__:
        raise ValueError(f"config.json names no config class of this model: {{name!r}}")
    return cls


def build_config(node: Any) -> Any:
    """JSON -> config objects: {{"class", "fields"}} is a dataclass, a list is a tuple."""
    if isinstance(node, dict):
        cls = config_class(node["class"])
        return cls(**{{key: build_config(value) for key, value in node["fields"].items()}})
    if isinstance(node, list):
        return tuple(build_config(item) for item in node)
    return node
'''


def hf_weights(model: DogmaModel) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The weights under `model.`, each shared tensor once (under its first name, as
    `named_parameters` gives it), and the names left out (a shared region's)."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: list[str] = []
    seen: set[int] = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            aliases.append(f"model.{name}")
            continue
        seen.add(id(t))
        tensors[f"model.{name}"] = t.detach().contiguous()
    return tensors, aliases


def write_hf(model: DogmaModel, genome: Genome, out_dir: str | Path) -> dict[str, Any]:
    """Write the Hugging Face files for a phenotype into out_dir (which exists). Returns the
    flat modules, the block kinds and the shared (tied) weight names."""
    out = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix=".hf-package-") as tmp:
        info = write_package(model, genome, tmp)
        package = Path(tmp) / PACKAGE
        document = json.loads((package / "config.json").read_text())
        flats, optional = flatten(package, out)
    shutil.copyfile(TEMPLATES / "configuration_dogma.py", out / "configuration_dogma.py")
    modeling = (TEMPLATES / "modeling_dogma.py").read_text()
    if modeling.count(MANIFEST_AFTER) != 1:
        raise StandaloneError(f"hf_template/modeling_dogma.py lacks the line {MANIFEST_AFTER.strip()!r}")
    (out / "modeling_dogma.py").write_text(
        modeling.replace(MANIFEST_AFTER, MANIFEST_AFTER + manifest(flats, optional))
    )
    tensors, aliases = hf_weights(model)
    (out / "model.safetensors").write_bytes(save(tensors, metadata={"format": "pt"}))  # ENOSPC: an OSError
    cfg = model.cfg
    config = {
        "architectures": ["DogmaForCausalLM"],
        "auto_map": AUTO_MAP,
        "model_type": "dogma",
        "dogma": document,
        "vocab_size": cfg.vocab,
        "hidden_size": cfg.d_model,
        "max_position_embeddings": cfg.max_len,
        "use_cache": True,
        # transformers honours a model's tied names only when this is set: true when a
        # region shares another's layers (the head is tied inside the model, not by name)
        "tie_word_embeddings": bool(aliases),
        "dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return {"modules": flats, "kinds": info["kinds"], "tied": aliases}
