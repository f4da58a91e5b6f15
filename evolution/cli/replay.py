"""Replay (`evolve replay ID`): train an individual again from its stored genome, seed and fidelity,
and say whether the metrics match the stored ones; exit 1 on a mismatch.

On CPU training is bit-exact given the same code, seed and torch thread count (a
reduction split over more threads adds in another order), so the replay uses the thread
count the worker recorded in the metrics (``torch_threads``, set by ``EvaluationPool``).
Metrics that measure the machine rather than the model (timings, throughput, peak
memory, where it ran) are reported but not compared (`compared`); metrics only one side has (the driver added
them after training, or this code records metrics the stored row's code did not) are listed.
`replay_individual` does the work and returns the report, `cmd_replay` prints it.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from dogma_evolve.evolution.cli.output import emit_json, open_reader, out
from dogma_evolve.evolution.cli.tasks import import_stored_plugins, import_stored_tasks
from dogma_evolve.evolution.errors import UsageError

#: Measurements of the machine, not of the model: never expected to repeat.
_NOT_COMPARED_PREFIXES = ("worker_",)
_NOT_COMPARED_WORDS = ("seconds", "per_s", "latency", "peak_memory", "cached_from", "torch_threads", "device")


def compared(key: str) -> bool:
    return not key.startswith(_NOT_COMPARED_PREFIXES) and not any(word in key for word in _NOT_COMPARED_WORDS)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def replay_individual(store: Any, record: Any, threads: int | None = None) -> dict[str, Any]:
    """Re-train ``record`` (an IndividualRecord) and compare; returns a JSON-able report."""
    import torch

    from dogma_evolve.evaluation import EvalRequest, train_model
    from dogma_evolve.evaluation.precision import precision_of

    stored = record.evaluation
    if stored is None:
        raise UsageError(f"individual {record.id} has no stored evaluation to replay")
    if stored.metrics.get("cached_from") is not None:
        raise UsageError(
            f"individual {record.id}'s evaluation was copied from evaluation "
            f"{stored.metrics['cached_from']}; replay that one"
        )
    if not isinstance(stored.fidelity, int):
        raise UsageError(f"fidelity {stored.fidelity!r} is not a number of steps")
    wanted = threads or stored.metrics.get("torch_threads")
    saved = torch.get_num_threads()
    if isinstance(wanted, int) and wanted > 0:
        torch.set_num_threads(wanted)
    try:
        request = EvalRequest(
            genome_yaml=record.yaml,
            genome_id=record.genome_id,
            task=stored.task,
            fidelity=stored.fidelity,
            seed=stored.seed,
            device="cpu",
            precision=precision_of(stored.metrics),  # as it trained (absent: fp32)
        )
        _, result = train_model(request)
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)
    # Keys only in the stored row were added by the driver after training (e.g. derived
    # costs); keys only in the replay are metrics this code records and the stored row's
    # did not (e.g. train_tokens and train_flops, before compute was recorded): both
    # listed, not compared.
    keys = sorted(k for k in result.metrics if k in stored.metrics)
    comparison = {
        key: {
            "stored": stored.metrics.get(key),
            "replayed": result.metrics.get(key),
            "equal": _same(stored.metrics.get(key), result.metrics.get(key)),
        }
        for key in keys
        if compared(key)
    }
    status_equal = result.status == stored.status
    return {
        "id": record.id,
        "run_id": record.run_id,
        "genome_id": record.genome_id,
        "task": stored.task,
        "fidelity": stored.fidelity,
        "seed": stored.seed,
        "torch_threads": used,
        "stored_status": stored.status,
        "replayed_status": result.status,
        "reason": result.reason,
        "match": status_equal and all(c["equal"] for c in comparison.values()),
        "metrics": comparison,
        "not_compared": [key for key in keys if not compared(key)],
        "stored_only": sorted(set(stored.metrics) - set(result.metrics)),
        "replayed_only": sorted(set(result.metrics) - set(stored.metrics)),
    }


EXIT_MISMATCH = 1


def cmd_replay(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import resolve_individual  # torch (phenotype's accounting)

    store = open_reader(args.store)  # read-only: a missing store is refused, not made
    try:
        record = resolve_individual(store, args.id)
        run = store.get_run(record.run_id)
        if run is not None:  # its block kinds, imported with the code they were pinned to
            import_stored_plugins(run.config, f"replaying individual {record.id}")
        if record.evaluation is not None:
            import_stored_tasks([record.evaluation.task], f"replaying individual {record.id}")
        report = replay_individual(store, record, threads=args.threads)
    finally:
        store.close()
    if args.json:
        emit_json(report)
    else:
        console = out()
        verdict = "match" if report["match"] else "MISMATCH"
        console.print(
            f"individual {report['id']} ({report['genome_id'][:12]}), {report['task']}, "
            f"{report['fidelity']} steps, seed {report['seed']}, "
            f"{report['torch_threads']} threads: {verdict}"
        )
        if report["stored_status"] != report["replayed_status"]:
            console.print(
                f"  status: stored {report['stored_status']}, replayed "
                f"{report['replayed_status']} {report['reason']}"
            )
        for key, c in report["metrics"].items():
            mark = "=" if c["equal"] else "≠"
            console.print(f"  {key:<20} {mark} stored {c['stored']!r}  replayed {c['replayed']!r}")
    return 0 if report["match"] else EXIT_MISMATCH


def add_replay_command(sub: Any, common: argparse.ArgumentParser) -> None:
    replay = sub.add_parser(
        "replay", parents=[common], help="re-train an individual and compare with its stored metrics"
    )
    replay.add_argument("id", help="individual id or genome-id prefix")
    replay.add_argument("--threads", type=int, help="torch threads (default: what the worker recorded)")
    replay.set_defaults(func=cmd_replay)
