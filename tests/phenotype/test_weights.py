"""The weights' bytes are the same in every process, and load back with their sharing.

A genome with a ``shares`` edge and tied embeddings has many names for one tensor;
``safetensors.torch.save_model`` lists them in metadata written from a hash map, so its
bytes changed from one process to the next (a soaked run's artifact checksum then differed
from the reference's with every weight equal)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import decode
from dogma_evolve.phenotype.weights import save_weights, unique_tensors, weights_bytes

SHARED = {
    "dogma": 1,
    "regions": [
        {"id": "s0", "type": "structural", "settings": {"d_model": 32, "vocab": 64, "tie_embeddings": True}},
        *(
            {
                "id": c,
                "type": "coding",
                "bases": [
                    {"base": "T", "kind": "attention", "params": {"heads": 2}},
                    {"base": "A", "kind": "swiglu", "params": {"hidden": 64}},
                ],
            }
            for c in ("c1", "c2")
        ),
    ],
    "edges": [{"source": "c1", "target": "c2", "kind": "shares"}],
}

HASH_IN_CHILD = """
import hashlib, sys, torch
sys.path.insert(0, {root!r})
from tests.phenotype.test_weights import shared_model
from dogma_evolve.phenotype.weights import weights_bytes
print(hashlib.sha256(weights_bytes(shared_model())).hexdigest())
"""


def shared_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return decode(Genome.from_dict(SHARED))


def test_shared_tensors_are_stored_once_under_their_first_name() -> None:
    model = shared_model()
    state = model.state_dict()
    tensors = unique_tensors(model)
    assert len(tensors) < len(state)  # the shares edge and the tied head collapse
    assert any(k.startswith("stages.c1.") for k in tensors)
    assert not any(k.startswith("stages.c2.") for k in tensors)  # c2's names sort after c1's
    for name, tensor in tensors.items():
        assert torch.equal(tensor, state[name])


def test_bytes_are_the_same_whatever_the_hash_seed() -> None:
    root = str(Path(__file__).resolve().parents[2])
    digests = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"}
        out = subprocess.run(
            [sys.executable, "-c", HASH_IN_CHILD.format(root=root)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
        )
        digests.add(out.stdout.strip())
    assert digests == {hashlib.sha256(weights_bytes(shared_model())).hexdigest()}


def test_weights_load_back_into_a_fresh_model_with_their_sharing(tmp_path: Path) -> None:
    trained = shared_model()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # not the initial weights
    save_weights(trained, tmp_path / "w.safetensors")
    assert load_file(tmp_path / "w.safetensors").keys() == unique_tensors(trained).keys()
    fresh = shared_model()
    missing, unexpected = load_model(fresh, str(tmp_path / "w.safetensors"))
    assert not missing and not unexpected
    for (name, a), b in zip(trained.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    tokens = torch.randint(0, 64, (2, 12))
    assert torch.equal(trained(tokens), fresh(tokens))
