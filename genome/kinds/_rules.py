"""Derivation rules that several gene kinds share (each kind's module says which it uses)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def heads_width(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """`head_dim` 0 = d_model / heads (heads must divide d_model)."""
    if p["head_dim"] == 0:
        if s["d_model"] % p["heads"]:
            raise ValueError(f"heads={p['heads']} does not divide d_model={s['d_model']}")
        p["head_dim"] = s["d_model"] // p["heads"]
    return p


def four_times(d_model: int) -> int:
    """The classic MLP width: 4 * d_model."""
    return 4 * d_model


def llama_hidden(d_model: int) -> int:
    """The LLaMA rule for gated MLPs: 2/3 * 4 * d_model, rounded up to a multiple of 8."""
    return 8 * ((8 * d_model // 3 + 7) // 8)
