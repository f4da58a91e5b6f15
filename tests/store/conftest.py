"""Shared helpers for the store tests, offered as fixtures (no import path games)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from store import GenomeIn, Store

TABLES = (
    "runs",
    "genomes",
    "individuals",
    "members",
    "evaluations",
    "lineage",
    "policy",
    "archive",
    "artifacts",
)


def make_genome(text: str) -> GenomeIn:
    """A genome whose id is the sha256 of its YAML, as the genome package makes them."""
    yaml_text = f"regions:\n- name: {text}\n"
    return GenomeIn(hashlib.sha256(yaml_text.encode()).hexdigest(), yaml_text, f"ACGT{text}")


def row_counts(path: Path) -> dict[str, int]:
    """Rows per table, read through a separate plain sqlite3 connection."""
    connection = sqlite3.connect(path)
    try:
        return {
            table: connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in TABLES
        }
    finally:
        connection.close()


def safetensors_bytes(values: list[float]) -> bytes:
    """A minimal valid safetensors file: one F32 tensor."""
    import struct

    data = struct.pack(f"<{len(values)}f", *values)
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}}
    ).encode()
    return len(header).to_bytes(8, "little") + header + data


@pytest.fixture
def helpers() -> SimpleNamespace:
    return SimpleNamespace(
        make_genome=make_genome, row_counts=row_counts, safetensors_bytes=safetensors_bytes
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "evolve.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{db_path}") as handle:
        yield handle
