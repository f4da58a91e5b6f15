"""The zero-cost proxy check: its proxies against a float64 hand computation, and the whole
script over a real store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.search_dogma import arm_config, drive_engine
from benchmarks.zero_cost import PROXIES, main, proxies
from dogma_evolve.evaluation.tasks import IGNORE_INDEX
from dogma_evolve.store import Store
from tests.benchmarks.test_search_pairing import FakePool

SHARED = {"population": 8, "steps": 10, "max_params": 60_000, "task": "suite", "confirm": 1}


class Tiny(nn.Module):
    """Embedding then a linear head: (B, T) ids -> (B, T, V) logits."""

    def __init__(self, vocab: int = 7, width: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_the_proxies_are_the_loss_its_gradient_norm_and_snip_in_float64() -> None:
    torch.manual_seed(0)
    model = Tiny()
    inputs = torch.randint(0, 7, (3, 4))
    targets = torch.randint(0, 7, (3, 4))
    targets[:, :2] = IGNORE_INDEX  # only the answer positions count
    got = proxies(model, inputs, targets)

    reference = Tiny().double()
    reference.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    logits = reference(inputs)[:, 2:]
    loss = -torch.log_softmax(logits, dim=-1).gather(-1, targets[:, 2:, None]).mean()
    params = list(reference.parameters())
    grads = torch.autograd.grad(loss, params)
    assert got["init_loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    assert got["grad_norm"] == pytest.approx(math.sqrt(sum(float((g**2).sum()) for g in grads)), rel=1e-5)
    assert got["snip"] == pytest.approx(
        sum(float((p.detach() * g).abs().sum()) for p, g in zip(params, grads, strict=True)), rel=1e-5
    )
    assert got["log_params"] == pytest.approx(math.log(sum(p.numel() for p in params)))


def test_the_check_reads_every_stored_genome_once_and_reports_both_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    config = arm_config("random", 3, SHARED)
    with Store(url) as store:
        drive_engine(config, store, FakePool(), budget=14 * 1_000 * config.steps)
        stored = {gid for gid, _, _ in store.scored_genomes("suite", config.steps)}
    assert len(stored) >= 8
    out = main(
        [
            "--store",
            url,
            "--steps",
            str(config.steps),
            "--folds",
            "2",
            "--repeats",
            "1",
            "--boot",
            "20",
            "--json",
        ]
    )
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(out))
    assert out["genomes"] + out["skipped"] == len(stored)
    assert set(out["correlation"]) == set(PROXIES)
    for c in out["correlation"].values():
        assert -1.0 <= c["rho"] <= 1.0 and c["low"] <= c["rho"] <= c["high"] and -1.0 <= c["kendall"] <= 1.0
    s = out["surrogate"]
    assert s["difference"]["mean"] == pytest.approx(s["features+proxies"][0] - s["features"][0])
