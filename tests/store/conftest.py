"""Shared helpers for the store tests, offered as fixtures (no import path games).

Every test that takes ``store`` / ``store_url`` runs twice: on a new SQLite file and on a
new PostgreSQL database (``EVOLVE_TEST_POSTGRES_URL``, which ``.ci/with-postgres`` sets).
Without that variable the PostgreSQL half is skipped with the reason, unless
``EVOLVE_REQUIRE_POSTGRES`` is set (CI), where it fails instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from dogma_evolve.store import GenomeIn, Store
from dogma_evolve.store.testing import (
    execute_unchecked,
    postgres_or_skip,
    row_counts,
    scalar,
    scratch_database,
)


def make_genome(text: str) -> GenomeIn:
    """A genome whose id is the sha256 of its YAML, as the genome package makes them."""
    yaml_text = f"regions:\n- name: {text}\n"
    return GenomeIn(hashlib.sha256(yaml_text.encode()).hexdigest(), yaml_text, f"ACGT{text}")


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
        make_genome=make_genome,
        row_counts=row_counts,
        scalar=scalar,
        safetensors_bytes=safetensors_bytes,
        execute_unchecked=execute_unchecked,
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "evolve.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, db_path: Path) -> Iterator[str]:
    """A URL of an empty store on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{db_path}"
        return
    with scratch_database(postgres_or_skip()) as url:
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as handle:
        yield handle
