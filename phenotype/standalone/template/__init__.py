"""A trained DOGMA phenotype as a self-contained, trainable PyTorch package.

Written by `evolve export` (this file is the template of the package's `__init__.py`; the
writer is `phenotype.standalone.writer`). It needs torch and safetensors only:

    import dogma_model

    model = dogma_model.load()                 # nn.Module in eval mode, weights loaded
    logits = model(ids)                        # ids (B, T) int64 -> logits (B, T, V)
    state = model.init_state(batch)            # recurrent decoding, one token at a time:
    logits_t, state = model.step(ids_t, state) # ids_t (B,) -> (B, V), the next state
    model.train()                              # fine-tune it like any nn.Module

Beside this file: `config.json` (the model's config tree: the block configs the genome
decoded to, plain JSON), `model.safetensors` (the trained weights), and the block modules
the model needs, copied from DOGMA's phenotype with their imports made relative. Sequence
operators (`kernels/`) pick their backend as DOGMA does: on CPU the C++ loop (compiled on
first use with torch.utils.cpp_extension, which needs a C++ compiler and ninja; without them
one warning and the plain-PyTorch reference) or a PyTorch loop with a hand-written backward;
on CUDA the Triton kernels where triton is installed; the reference under torch.export and
torch.compile, and wherever no fast path applies. `backend="torch"` forces the reference.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model
from torch import nn

FORMAT = "dogma_model/1"
PACKAGE_DIR = Path(__file__).resolve().parent
_MODULE = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*")

__all__ = ["FORMAT", "PACKAGE_DIR", "load", "model_config", "read_config"]


def read_config() -> dict[str, Any]:
    """`config.json`: `format`, `genome_id`, `sequence` (the genome's one-line view),
    `modules` (DOGMA's modules copied here), `model` (the config tree)."""
    doc = json.loads((PACKAGE_DIR / "config.json").read_text())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"config.json is not a {FORMAT} document")
    return doc


def _class(name: str) -> type[Any]:
    """A config dataclass of this package, from its `module:Class` name in config.json."""
    module, _, qualname = name.partition(":")
    if not _MODULE.fullmatch(module) or not qualname.isidentifier():
        raise ValueError(f"config.json names no class of this package: {name!r}")
    mod = importlib.import_module(f".{module}", __name__)
    cls = getattr(mod, qualname, None)
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls) or cls.__module__ != mod.__name__:
        raise ValueError(f"config.json names no config class of this package: {name!r}")
    return cls


def _build(node: Any) -> Any:
    """JSON -> config objects: {"class", "fields"} is a dataclass, a list is a tuple."""
    if isinstance(node, dict):
        cls = _class(node["class"])
        return cls(**{key: _build(value) for key, value in node["fields"].items()})
    if isinstance(node, list):
        return tuple(_build(item) for item in node)
    return node


def model_config() -> Any:
    """The model's config tree (`config.ModelConfig`), as the genome decoded to it."""
    return _build(read_config()["model"])


def load(
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    weights: str | Path | None = None,
) -> nn.Module:
    """The trained model, in eval mode: ids (B, T) int64 -> logits (B, T, V).

    `device`: where to build it (default: the CPU); `dtype`: cast the parameters after
    loading (default: as saved, float32); `weights`: another safetensors file of the same
    model (default: this package's `model.safetensors`). Every parameter requires grad:
    call `.train()` and fine-tune it. `init_state(batch)` and `step(ids_t, state)` decode one
    token at a time from a recurrent state (KV caches, scan states), equal to the parallel
    forward; `generate(prompt, new_tokens)` decodes greedily or by sampling.
    """
    cfg = model_config()
    with torch.device(device or "cpu"):
        model = cfg.build()
    model.to(device or "cpu")  # what a library's swapped factory function built elsewhere (`decode`)
    path = Path(weights) if weights is not None else PACKAGE_DIR / "model.safetensors"
    device_name = str(next(model.parameters()).device)
    missing, unexpected = load_model(model, str(path), strict=True, device=device_name)
    if missing or unexpected:  # strict=True raises first; kept for safetensors versions that don't
        raise ValueError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()
