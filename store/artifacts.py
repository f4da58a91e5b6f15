"""Trained weights of an individual: safetensors bytes kept inline or as a file's path.

The sha256 of the bytes is stored with them and checked on every read, so weights that
changed on disk (or in the row) are reported as damaged instead of being loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from dogma_evolve.store.models import Artifact, Individual
from dogma_evolve.store.records import StoreError

#: The kind a run's survivors' trained weights are kept under (the engine writes them, an
#: export reads them).
WEIGHTS_ARTIFACT = "weights"


@dataclass(frozen=True)
class Weights:
    """Checked safetensors content, and the file it came from (None: kept inline)."""

    content: bytes
    path: str | None
    sha256: str

    @classmethod
    def given(cls, data: bytes | None, path: str | os.PathLike[str] | None) -> Weights:
        """Exactly one of ``data`` / ``path``, read and checked before any transaction."""
        if (data is None) == (path is None):
            raise StoreError("put_artifact: give exactly one of data= or path=")
        stored_path: str | None = None
        if path is not None:
            file = Path(path).resolve()
            try:
                content = file.read_bytes()
            except OSError as exc:
                raise StoreError(f"put_artifact: cannot read {file}: {exc}") from exc
            stored_path = os.fspath(file)
        else:
            content = bytes(data)  # type: ignore[arg-type]
        check_safetensors(content)
        return cls(content, stored_path, hashlib.sha256(content).hexdigest())


def check_safetensors(data: bytes) -> None:
    """Cheap structural check: 8-byte little-endian header length, then a JSON object."""
    if len(data) < 8:
        raise StoreError("artifact is not safetensors: shorter than its 8-byte header length")
    header_length = int.from_bytes(data[:8], "little")
    if header_length < 2 or 8 + header_length > len(data):
        raise StoreError("artifact is not safetensors: header length out of range")
    try:
        header = json.loads(data[8 : 8 + header_length])
    except ValueError as exc:
        raise StoreError(f"artifact is not safetensors: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise StoreError("artifact is not safetensors: header is not a JSON object")


def put(session: Session, run_id: str, individual_id: int, kind: str, weights: Weights) -> str:
    """Keep ``weights`` as the (individual, kind) artifact, replacing an earlier one."""
    birth = session.get(Individual, individual_id)
    if birth is None or birth.run_id != run_id:
        raise StoreError(f"run {run_id} has no individual {individual_id}")
    row = _find(session, individual_id, kind)
    if row is None:
        row = Artifact(run_id=run_id, individual_id=individual_id, kind=kind)
        session.add(row)
    row.path = weights.path
    row.blob = None if weights.path is not None else weights.content
    row.sha256 = weights.sha256
    return weights.sha256


def stored(session: Session, individual_id: int, kind: str) -> tuple[str | None, bytes | None, str] | None:
    """(path, inline bytes, sha256) of the artifact, or None; the bytes are read later."""
    row = _find(session, individual_id, kind)
    return None if row is None else (row.path, row.blob, row.sha256)


def checked_content(individual_id: int, kind: str, found: tuple[str | None, bytes | None, str]) -> bytes:
    """The artifact's bytes (from its file or inline) once their sha256 matches."""
    stored_path, blob, digest = found
    if stored_path is not None:
        try:
            content = Path(stored_path).read_bytes()
        except OSError as exc:
            raise StoreError(f"artifact {kind} of {individual_id}: {exc}") from exc
    else:
        content = blob or b""
    actual = hashlib.sha256(content).hexdigest()
    if actual != digest:
        raise StoreError(
            f"artifact {kind} of individual {individual_id} is damaged: sha256 {actual} "
            f"differs from the stored {digest}"
        )
    return content


def _find(session: Session, individual_id: int, kind: str) -> Artifact | None:
    return session.scalars(
        select(Artifact).where(Artifact.individual_id == individual_id, Artifact.kind == kind)
    ).first()
