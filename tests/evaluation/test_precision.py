"""Mixed precision: bf16 autocast tracks fp32, the scans stay fp32 inside it, results record
their precision, runs store it, and the cache never mixes precisions."""

from __future__ import annotations

import json

import pytest
import torch

from dogma_evolve.evaluation import EvalRequest, evaluate, get_task, score, train
from dogma_evolve.evaluation import precision as precision_module
from dogma_evolve.evaluation.precision import pool_precision, precision_of, resolve_precision
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.genome import Genome
from dogma_evolve.kernels import gated_linear_recurrence, selective_scan, wkv
from dogma_evolve.phenotype import decode
from tests.phenotype.test_standalone import GENOMES as STANDALONE_GENOMES

# one of each kind of work: a selective scan, a gated linear recurrence, attention, an MLP
GENOME = """
regions:
- {id: s0, type: structural, settings: {d_model: 32, vocab: 29, max_len: 15, positions: rope}}
- id: c1
  type: coding
  bases:
  - {base: T, kind: mamba}
  - {base: A, kind: swiglu}
  - {base: T, kind: linear_attention}
  - {base: T, kind: attention, params: {heads: 2}}
"""


def _trained(precision: str) -> tuple[float, float, torch.nn.Module]:
    task = get_task("mqar")
    torch.manual_seed(0)
    model = decode(Genome.from_yaml(GENOME))
    stats = train(model, task, 48, seed=0, batch_size=16, lr=1e-2, precision=precision)
    scored = score(model, task, batch_size=16, eval_batches=4, precision=precision)
    return stats.train_loss, scored.loss, model


def test_bf16_training_tracks_fp32_within_a_few_bf16_roundings():
    fp32_train, fp32_heldout, _ = _trained("fp32")
    bf16_train, bf16_heldout, model = _trained("bf16")
    # bfloat16 keeps 8 significant bits: one rounding is off by at most 2^-8 ≈ 0.4 %
    # relative. 48 AdamW steps let such roundings move the two trajectories apart, but not
    # by more than a few of them: 2 % relative (measured: 0.15 %). Training itself lowers
    # the loss from ln(29) ≈ 3.37 by about 0.7 nats, over ten times the tolerance, so a
    # bf16 run that did not train, or trained something else, fails here.
    tolerance = 0.02
    assert bf16_train == pytest.approx(fp32_train, rel=tolerance)
    assert bf16_heldout == pytest.approx(fp32_heldout, rel=tolerance)
    assert fp32_heldout < 3.37 - 0.5  # it learned
    assert bf16_heldout != fp32_heldout  # autocast did run: bf16 arithmetic differs
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights


def _scan_inputs() -> dict[str, tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    b, d, length, n = 2, 8, 40, 4
    scan = (
        torch.randn(b, d, length, generator=g),
        torch.randn(b, d, length, generator=g),
        -torch.rand(d, n, generator=g) - 0.1,
        torch.randn(b, n, length, generator=g),
        torch.randn(b, n, length, generator=g),
    )
    heads, dk = 2, 8
    glr = tuple(torch.randn(b, heads, length, dk, generator=g) for _ in range(3)) + (
        -0.1 * torch.rand(b, heads, length, generator=g),
    )
    glr1 = tuple(torch.randn(b, heads, length, 1, generator=g) for _ in range(3)) + (
        -0.1 * torch.rand(b, heads, length, generator=g),
    )  # one-element states: the CPU step loop
    channels = 8
    rwkv = (
        torch.rand(channels, generator=g),
        torch.randn(channels, generator=g),
        torch.randn(b, length, channels, generator=g),
        torch.randn(b, length, channels, generator=g),
    )
    return {"scan": scan, "glr": glr, "glr1": glr1, "wkv": rwkv}


OPS = {
    "selective_scan/torch": lambda x: selective_scan(*x["scan"], delta_softplus=True, backend="torch"),
    "selective_scan/cpu": lambda x: selective_scan(*x["scan"], delta_softplus=True, backend="cpu"),
    "selective_scan/triton": lambda x: selective_scan(*x["scan"], delta_softplus=True, backend="triton"),
    "selective_scan/chunk": lambda x: selective_scan(*x["scan"], delta_softplus=True, backend="chunk"),
    "gated_linear_recurrence/torch": lambda x: gated_linear_recurrence(*x["glr"], backend="torch")[0],
    "gated_linear_recurrence/chunk": lambda x: gated_linear_recurrence(*x["glr"], backend="chunk")[0],
    "gated_linear_recurrence/triton": lambda x: gated_linear_recurrence(*x["glr"], backend="triton")[0],
    "gated_linear_recurrence/cpu": lambda x: gated_linear_recurrence(*x["glr1"], backend="cpu")[0],
    "wkv/torch": lambda x: wkv(*x["wkv"], backend="torch"),
    "wkv/triton": lambda x: wkv(*x["wkv"], backend="triton"),
    "wkv/cpu": lambda x: wkv(*x["wkv"], backend="cpu"),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_kernels_compute_in_fp32_under_bf16_autocast(op):
    """Under autocast the kernels run on float32 copies with autocast off: the result equals
    the fp32 one to fp32 rounding (the chunked gated recurrence's matrix products in bf16
    were off by 0.3 before `kernels._dispatch.full_precision`), gradients included."""
    inputs = _scan_inputs()
    leaves = [t.requires_grad_() for group in inputs.values() for t in group]
    expected = OPS[op](inputs)
    (expected_grads,) = [torch.autograd.grad(expected.square().sum(), leaves, allow_unused=True)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = OPS[op](inputs)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(got.square().sum(), leaves, allow_unused=True)
    for grad, want in zip(grads, expected_grads, strict=True):
        if want is not None:
            torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-4)


def test_resolve_precision():
    assert resolve_precision("auto", "cuda") == "bf16"
    assert resolve_precision("auto", "cpu") == precision_module.cpu_probe().choice
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("fp32", "cuda") == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16", "cuda")

    class GpuPool:
        device_type = "cuda"

    assert pool_precision("auto", GpuPool()) == "bf16"
    assert precision_of({}) == "fp32" and precision_of({"precision": "bf16"}) == "bf16"


def _request(**fields) -> EvalRequest:
    return EvalRequest(genome_yaml=GENOME, genome_id="g", task="mqar", fidelity=2, batch_size=4, **fields)


def test_a_result_records_the_precision_it_trained_in():
    # auto on a CPU: the probe's choice (fp32 without bfloat16 units; bf16 where it pays)
    assert evaluate(_request(device="cpu")).metrics["precision"] == precision_module.cpu_probe().choice
    bf16 = evaluate(_request(device="cpu", precision="bf16"))
    assert bf16.status == "ok", bf16.reason
    assert bf16.metrics["precision"] == "bf16"
    bad = evaluate(_request(precision="fp8"))
    assert bad.status == "invalid" and "precision" in bad.reason


def test_run_config_stores_precision_and_old_runs_resume_in_fp32():
    config = RunConfig(precision="bf16")
    assert RunConfig.from_dict(config.to_dict()).precision == "bf16"
    assert RunConfig().precision == "auto"
    old = {k: v for k, v in RunConfig().to_dict().items() if k != "precision"}
    assert RunConfig.from_dict(old).precision == "fp32"  # as it ran: nothing was autocast
    with pytest.raises(ValueError, match="precision"):
        RunConfig(precision="fp16")


def test_the_cache_copies_only_results_of_the_runs_precision(tmp_path):
    from dogma_evolve.evolution.evaluating import EvalKey, Evaluator
    from dogma_evolve.evolution.spaces.registry import SPACES
    from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, Store, by_slot

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    genome = Genome.from_yaml(GENOME)
    key = EvalKey(genome.id, "mqar", 2, 7)
    stored = {}
    for precision in ("bf16", "fp32"):
        run_id = store.create_run({}, seed=0, task="mqar")
        metrics = {"quality": 0.5} if precision == "fp32" else {"quality": 0.5, "precision": precision}
        store.commit_generation(
            run_id,
            0,
            genomes=[GenomeIn(genome.id, genome.to_yaml(), "x")],
            individuals=[IndividualIn(0, genome.id, 0)],
            evaluations=[EvaluationIn(*key, "ok", metrics, individual=by_slot(0))],
            members=[by_slot(0)],
        )
        stored[precision] = run_id
    config = RunConfig(precision="bf16")
    fresh = store.create_run(config.to_dict(), seed=0, task="mqar")
    space = SPACES[config.space].from_config(config)
    evaluator = Evaluator(config, space, store, fresh, lambda *_: None)
    # the oldest row of the key (bf16) is this run's precision: copied
    rec, here = evaluator._lookup(key, "bf16")
    assert rec is not None and not here and precision_of(rec.metrics) == "bf16"
    # an fp32 run must not copy it: it copies the younger fp32 row of the key instead
    rec, here = evaluator._lookup(key, "fp32")
    assert (
        rec is not None and not here and rec.run_id == stored["fp32"] and precision_of(rec.metrics) == "fp32"
    )
    # and where the key holds no row of its precision, it trains again
    assert evaluator._lookup(key, "fp16-never-stored") == (None, False)
    # a run's own rows are its own, whatever they record
    rec, here = Evaluator(config, space, store, stored["bf16"], lambda *_: None)._lookup(key, "fp32")
    assert here and rec is not None
    store.close()


def test_a_bf16_result_replays_in_bf16(tmp_path):
    """`evolve replay` re-trains in the precision the stored row records: a CPU bf16 run
    replays bit for bit (in fp32 its losses would differ)."""
    from dogma_evolve.evolution.cli.replay import replay_individual
    from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, Store, by_slot

    genome = Genome.from_yaml(GENOME)
    request = EvalRequest(genome.to_yaml(), genome.id, "mqar", 2, device="cpu", precision="bf16")
    result = evaluate(request)
    assert result.ok, result.reason
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id = store.create_run({}, seed=0, task="mqar")
    store.commit_generation(
        run_id,
        0,
        genomes=[GenomeIn(genome.id, genome.to_yaml(), "x")],
        individuals=[IndividualIn(0, genome.id, 0)],
        evaluations=[EvaluationIn(genome.id, "mqar", 2, 0, "ok", result.metrics, individual=by_slot(0))],
        members=[by_slot(0)],
    )
    [record] = store.individuals(run_id)
    report = replay_individual(store, record)
    store.close()
    assert report["match"], {k: v for k, v in report["metrics"].items() if not v["equal"]}
    assert report["metrics"]["precision"]["replayed"] == "bf16"


class _RecordingPool:
    """Evaluates in this process, remembering the requests (the engine's pool protocol)."""

    device_type = "cpu"

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    def evaluate(self, requests, on_result=None):
        results = []
        for request in requests:
            self.requests.append(request)
            results.append(evaluate(request))
            if on_result:
                on_result(results[-1])
        return results


def test_runs_reuse_only_results_of_their_own_precision(tmp_path):
    from dogma_evolve.evolution.engine import Engine
    from dogma_evolve.store import Store

    def run(store, precision: str) -> list[EvalRequest]:
        pool = _RecordingPool()
        config = RunConfig(
            population=2, generations=0, steps=2, min_steps=0, seed=5, max_params=60_000, precision=precision
        )
        Engine(config, store, pool).run()
        return pool.requests

    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:
        first = run(store, "fp32")
        assert first and {r.precision for r in first} == {"fp32"}
        again_bf16 = run(store, "bf16")  # same genomes and keys, another precision: trained
        assert {r.genome_id for r in again_bf16} == {r.genome_id for r in first}
        assert {r.precision for r in again_bf16} == {"bf16"}
        # auto on a CPU pool is what the probe measured, fp32 or bf16: stored either way
        assert run(store, "auto") == []


@pytest.mark.parametrize("name", sorted(STANDALONE_GENOMES))
def test_every_block_kind_trains_a_step_under_bf16_autocast(name):
    """`--precision bf16` (and ``auto`` where the probe picks it) must not crash any kind: the
    genomes the export test uses, which between them hold every registered kind (a mixture of
    experts added bf16 expert outputs into a float32 buffer until it cast them)."""
    genome = STANDALONE_GENOMES[name]()
    torch.manual_seed(0)
    model = decode(genome)
    ids = torch.randint(0, genome.structural["vocab"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)


def test_auto_on_a_cpu_without_bf16_units_is_fp32_untimed(monkeypatch):
    """No AMX and no AVX512-BF16: bfloat16 products are emulated, so ``auto`` is fp32 and
    nothing is timed."""
    monkeypatch.setattr(precision_module, "cpu_has_bf16_units", lambda: False)
    monkeypatch.setattr(precision_module, "step_gflops", _never_timed)
    precision_module.cpu_probe.cache_clear()
    try:
        probe = precision_module.cpu_probe()
        assert probe.choice == "fp32" and probe.fp32_gflops is None
        assert "no bfloat16 matrix instructions" in probe.reason
        assert resolve_precision("auto", "cpu") == "fp32"
    finally:
        precision_module.cpu_probe.cache_clear()


@pytest.mark.parametrize(
    ("fp32", "bf16", "chosen"), [(60.0, 200.0, "bf16"), (60.0, 70.0, "fp32"), (60.0, 7.0, "fp32")]
)
def test_auto_on_a_cpu_with_bf16_units_follows_the_measured_probe(monkeypatch, tmp_path, fp32, bf16, chosen):
    """With the instructions, the probe's timing decides: bf16 only where it is at least
    BF16_MARGIN faster; the choice goes to every request of a CPU pool."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no verdict stored yet: measured
    bf16_speed = bf16
    monkeypatch.setattr(precision_module, "cpu_has_bf16_units", lambda: True)
    monkeypatch.setattr(precision_module, "step_gflops", lambda bf16: bf16_speed if bf16 else fp32)
    precision_module.cpu_probe.cache_clear()
    try:
        assert precision_module.cpu_probe().choice == chosen
        assert resolve_precision("auto", "cpu") == chosen
        assert pool_precision("auto", None) == (chosen if not torch.cuda.is_available() else "bf16")
        assert resolve_precision("fp32", "cpu") == "fp32"  # only auto is measured
    finally:
        precision_module.cpu_probe.cache_clear()


def test_the_verdict_is_measured_once_per_machine_and_then_read(monkeypatch, tmp_path):
    """The first process measures and stores the verdict; a later one (the cache cleared, as
    in a new process) reads it without timing anything, so two runs of one seed train in one
    arithmetic under any load. Another machine's or probe version's verdict is replaced."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(precision_module, "cpu_has_bf16_units", lambda: True)
    monkeypatch.setattr(precision_module, "step_gflops", lambda bf16: 200.0 if bf16 else 60.0)
    precision_module.cpu_probe.cache_clear()
    try:
        assert precision_module.cpu_probe().choice == "bf16"
        stored = json.loads(precision_module.probe_file().read_text())
        assert stored["choice"] == "bf16" and stored["key"] == precision_module._machine_key()
        # a later process: the probe would now say fp32, but the stored verdict stands
        monkeypatch.setattr(precision_module, "step_gflops", _never_timed)
        precision_module.cpu_probe.cache_clear()
        again = precision_module.cpu_probe()
        assert again.choice == "bf16" and again.reason.endswith("(stored)")
        # a verdict of another machine (or probe version) is measured anew and replaced
        precision_module.probe_file().write_text(json.dumps({**stored, "key": "another CPU"}))
        monkeypatch.setattr(precision_module, "step_gflops", lambda bf16: 61.0 if bf16 else 60.0)
        precision_module.cpu_probe.cache_clear()
        assert precision_module.cpu_probe().choice == "fp32"
        assert json.loads(precision_module.probe_file().read_text())["choice"] == "fp32"
    finally:
        precision_module.cpu_probe.cache_clear()


def test_where_no_verdict_can_be_stored_the_measurement_is_used(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would go: nothing can be written
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    probe = precision_module.stored_verdict(lambda: precision_module.CpuProbe("fp32", "measured", 1.0, 1.0))
    assert probe.choice == "fp32" and probe.reason == "measured"


def test_the_probe_measures_both_arithmetics():
    """The probe's model really trains a step: a positive GFLOP/s in each arithmetic (no timing asserted)."""
    assert precision_module.step_gflops(bf16=False, width=16, tokens=64) > 0
    assert precision_module.step_gflops(bf16=True, width=16, tokens=64) > 0


def _never_timed(*_args, **_kwargs):
    raise AssertionError("the probe timed an arithmetic this CPU cannot run fast")
