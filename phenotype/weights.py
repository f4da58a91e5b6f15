"""A model's weights as safetensors bytes that are the same in every process.

``safetensors.torch.save_model`` stores each tensor shared by several names once and lists
the names it dropped in the file's metadata, which the library writes from a hash map: with
two or more shared names (tied embeddings, a ``shares`` edge) the header's byte order, and so
the file's sha256, changes from one process to the next while every weight is equal. Stored
artifacts are compared by checksum (a resumed run against an uninterrupted one), so the
weights are written here without that list: one name per shared tensor, the first in sorted
order (the name ``save_model`` keeps), and one fixed metadata entry. ``load_model`` restores
the sharing from the model it loads into and needs no list.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save
from torch import nn

#: the only metadata written (one entry: a multi-entry map has no fixed byte order)
METADATA = {"format": "pt"}


def unique_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor under its first name in sorted order, on the
    CPU and contiguous; a tensor that overlaps another's memory without being the same view
    is copied, so the result shares no memory."""
    state = model.state_dict()
    kept: dict[tuple[object, ...], str] = {}
    storages: set[tuple[object, int]] = set()
    out: dict[str, torch.Tensor] = {}
    for name in sorted(state):
        tensor = state[name].detach()
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        view = (*storage, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
        if tensor.numel() and view in kept:
            continue  # the same tensor under another name: stored once
        if tensor.numel():
            kept[view] = name
        shares_memory = tensor.numel() > 0 and storage in storages
        storages.add(storage)
        tensor = tensor.cpu().contiguous()
        out[name] = tensor.clone() if shares_memory else tensor
    return out


def weights_bytes(model: nn.Module) -> bytes:
    """The model's weights as the bytes of a safetensors file (module docstring)."""
    return save(unique_tensors(model), metadata=METADATA)


def save_weights(model: nn.Module, path: str | os.PathLike[str]) -> None:
    """Write ``weights_bytes(model)`` to ``path`` (atomically: a temporary file renamed)."""
    target = Path(path)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".tmp", delete=False) as f:
        tmp = Path(f.name)
    try:
        # written from Python, not safetensors' own writer: a full disk is then an OSError
        # (ENOSPC) that callers can tell apart and report in one line
        tmp.write_bytes(weights_bytes(model))
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
