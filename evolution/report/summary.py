"""Plain-data views of individuals for the command line: run results, audits, lookups,
and the run report (`run_report`: per generation, the run's training compute and its
fidelity transfer; `report_lines` says them in text)."""

from __future__ import annotations

import re
from typing import Any

from dogma_evolve.evaluation.environment import ENVIRONMENT_MARK, is_environment_reason
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.report.ledger import real_evaluations, run_ledger, table_space
from dogma_evolve.evolution.scale.ladder_report import individual_ladder, ladder_lines, ladder_summary
from dogma_evolve.evolution.transfer_audit import (
    TransferAudit,
    correlation_text,
    ranked_text,
    run_transfer,
    transfer_warning,
)
from dogma_evolve.genome import Genome
from dogma_evolve.store import IndividualRecord, Store
from dogma_evolve.store.keys import natural_key

FILTERED = "filtered"  # the evaluation status of a birth the pre-filter stopped (`evolution.evaluating`)


def individual_summary(ind: Any) -> dict[str, Any]:
    """id, genome_id, metrics, status and sequence of a stored run's individual (an
    `evolution.study.Individual`, as `StoredRun.front` gives them): `evolve run`'s front."""
    return {
        "id": ind.id,
        "genome_id": ind.genome_id,
        "metrics": dict(ind.metrics),
        "status": ind.status,
        "sequence": ind.sequence,
    }


def resolve_individual(store: Store, key: str, run_id: str | None = None) -> IndividualRecord:
    """An individual by integer id, or by a unique genome-id prefix (4+ hex digits; the
    newest individual of that genome, in ``run_id`` when given, in a search rather than in
    an `evolve scale` or `evolve ablate` run that trained it too). Digits that are no
    individual's id are tried as a genome-id prefix."""
    key = key.strip()
    if key.isascii() and key.isdigit():
        if len(key) > 18:  # beyond any 64-bit id: say so rather than overflow the database
            raise UsageError(f"no individual {key[:30]}")
        record = store.individual(int(key))
        if record is not None and run_id is not None and record.run_id != run_id:
            raise UsageError(f"individual {key} is not of run {run_id}")
        if record is not None:
            return with_recorded_kinds(store, record.run_id, record)
        if len(key) < 4 or not store.find_individuals_by_genome_prefix(key, run_id):
            raise UsageError(f"no individual {key}")
    if not re.fullmatch(r"[0-9a-fA-F]{4,64}", key):
        raise UsageError(f"{key!r:.70} is neither an individual id nor a genome-id prefix (4+ hex digits)")
    matches = store.find_individuals_by_genome_prefix(key.lower(), run_id)
    genomes = {m.genome_id for m in matches}
    if not matches:
        raise UsageError(f"no genome with id prefix {key}" + (f" in run {run_id}" if run_id else ""))
    if len(genomes) > 1:
        raise UsageError(f"genome-id prefix {key} is ambiguous: {len(genomes)} genomes start with it")
    kinds = {r.id: r.kind for r in store.list_runs()}
    found = max(matches, key=lambda m: (kinds.get(m.run_id) == "search", m.id))
    return with_recorded_kinds(store, found.run_id, found)


def with_recorded_kinds(store: Store, run_id: str, record: IndividualRecord) -> IndividualRecord:
    """``record`` (of run ``run_id``), once the plugin kinds its run recorded
    (``RunConfig.plugin_code``) stand in for their genes (`stored_run.register_recorded_kinds`):
    a reader parses and shows its genome, and its ancestors', without importing the plugin
    (a command that builds the model imports the plugin after this, and its real genes
    replace the stand-ins)."""
    from dogma_evolve.evolution.study.stored_run import register_recorded_kinds

    run = store.get_run(run_id)
    register_recorded_kinds(run.config if run is not None else {})
    return record


def latest_run(store: Store) -> str:
    """The run a command means when none is named: the newest search (`evolve run`); the
    newest run of any kind (`evolve scale`, `evolve ablate` record theirs as runs too) only
    when the store holds no search."""
    run = store.newest_run("search") or store.newest_run()
    if run is None:
        raise UsageError("the store holds no runs")
    return run.id


def best_individual(store: Store, run_id: str | None, stored: Any = None) -> IndividualRecord:
    """The run's (default: newest run's) best individual: for a search, `StoredRun.best`, the
    one rule `run`'s summary, `export --best` and the Python API share (the ladder's rank 1
    under ``select_by: ladder``, else the best confirmed under the run's seeds, quality ↑
    then params ↓); for another kind of run (scale, ablate), its best evaluated individual
    in that order. ``stored``: the run already open (a `StoredRun`), else it is opened."""
    from dogma_evolve.evolution.objectives import quality_of

    if run_id is None:
        run_id = latest_run(store)
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id}")
    if run.kind == "search":
        from dogma_evolve.evolution.study.stored_run import StoredRun

        best = (stored if stored is not None else StoredRun.open(store, run_id)).best()
        if best is None:
            raise UsageError(f"run {run_id} has no successfully evaluated individual")
        record = store.individual(best.id)
        assert record is not None  # the stored run read it from this store
        return with_recorded_kinds(store, run_id, record)
    evaluated = [i for i in store.individuals(run_id) if i.status == "ok"]
    if not evaluated:
        raise UsageError(f"run {run_id} has no successfully evaluated individual")

    def rank(i: IndividualRecord) -> tuple[float, float, int]:
        metrics = i.metrics or {}
        return (-quality_of(metrics), metrics.get("params", 0), i.id)

    return with_recorded_kinds(store, run_id, min(evaluated, key=rank))


def record_summary(record: IndividualRecord, space: Any = None) -> dict[str, Any]:
    """``individual_summary``'s fields of a stored individual; ``space``: the run's search
    space, which reads its genome (default: a DOGMA genome)."""
    from dogma_evolve.evolution.rules import stored_result

    task = None if record.evaluation is None else record.evaluation.task
    status, metrics, _ = stored_result([e for e in record.evaluations if e.task == task])
    return {
        "id": record.id,
        "genome_id": record.genome_id,
        "metrics": metrics,  # with further seeds: quality is their mean, quality_seeds each
        "status": status,
        "sequence": (
            Genome.from_yaml(record.yaml) if space is None else space.parse(record.yaml)
        ).sequence_view(),
    }


def ladder_choice(store: Store, run_id: str) -> IndividualRecord | None:
    """The individual ranked 1 by the run's latest ladder when the run selects by the ladder
    (``select_by: ladder``); None otherwise, or when its ladder ranked none."""
    from dogma_evolve.evolution.study.stored_run import ladder_choice_id

    run = store.get_run(run_id)
    chosen = None if run is None else ladder_choice_id(store, run_id, getattr(run, "config", None) or {})
    return None if chosen is None else store.individual(chosen)


def _region_summary(genome: Genome) -> list[dict[str, Any]]:
    out = []
    for r in genome.regions:
        if r.settings:
            summary = " ".join(f"{k}={v}" for k, v in r.settings)
        else:
            summary = " ".join(f"{b.type}:{b.gene.kind}" for b in r.bases)
        out.append({"id": r.id, "type": r.type, "summary": summary})
    return out


def audit_record(store: Store, record: IndividualRecord) -> dict[str, Any]:
    """Everything `evolve audit` shows, as plain data."""
    from dogma_evolve.evolution.policy import top_operators

    credit = top_operators(store.policy(record.run_id), 10)
    from dogma_evolve.evolution.report.blame import space_of

    if space_of(store, record) == "nb201":  # a table-space cell: no DOGMA accounting
        return _cell_audit(store, record, credit)
    genome = Genome.from_yaml(record.yaml)
    acct = _costs(genome, record)
    return {
        "id": record.id,
        "run_id": record.run_id,
        "generation": record.generation,
        "genome_id": record.genome_id,
        "sequence": record.sequence,
        "regions": _region_summary(genome),
        "edges": [{"source": e.source, "target": e.target, "kind": e.kind} for e in genome.edges],
        "parents": record.parents,
        "operator": record.operator,
        "change": record.change,
        "status": record.status,
        "metrics": record.metrics or {},
        "reason": record.evaluation.reason if record.evaluation else None,
        "seed": record.seed,
        "params": acct["params"],
        "active_params": acct["active_params"],
        "state_bytes_per_token": acct["state_bytes_per_token"],
        "state_bytes_fixed": acct["state_bytes_fixed"],
        "flops_per_token": acct["flops_per_token"],
        "ancestry": _ancestry(store, record),
        "operator_credit": credit,
        "ladder": individual_ladder(store, record.run_id, record.id),
    }


COSTS = ("params", "active_params", "state_bytes_per_token", "state_bytes_fixed", "flops_per_token")


def _costs(genome: Genome, record: IndividualRecord) -> dict[str, Any]:
    """The genome's analytic costs (`phenotype.account`); for a genome holding a plugin
    kind whose code this reader did not import (a stand-in gene, no block), what its
    evaluation recorded (None where it recorded nothing)."""
    from dogma_evolve.phenotype import REGISTRY, account  # torch: only what audits a genome loads it

    if all(b.gene.kind in REGISTRY for r in genome.regions for b in r.bases):
        acct = account(genome)
        return {name: getattr(acct, name) for name in COSTS}
    metrics = record.metrics or {}
    return {name: metrics.get(name) for name in COSTS}


def _ancestry(store: Store, record: IndividualRecord) -> list[dict[str, Any]]:
    """The individual and its ancestors back to the seeds, breadth first (the store walks
    the lineage table; each ancestor once)."""
    return [
        {
            "id": s.individual_id,
            "depth": s.depth,
            "generation": s.generation,
            "genome_id": s.genome_id,
            "operator": s.operator,
            "change": s.change,
            "parents": [p.parent_id for p in s.parents],
        }
        for s in store.ancestry(record.id)
    ]


def _cell_audit(store: Store, record: IndividualRecord, credit: list) -> dict[str, Any]:
    metrics = record.metrics or {}
    return {
        "id": record.id,
        "run_id": record.run_id,
        "generation": record.generation,
        "genome_id": record.genome_id,
        "sequence": record.sequence,
        "regions": [],
        "edges": [],
        "parents": record.parents,
        "operator": record.operator,
        "change": record.change,
        "status": record.status,
        "metrics": metrics,
        "reason": record.evaluation.reason if record.evaluation else None,
        "seed": record.seed,
        "params": int(metrics.get("params", 0)),
        "active_params": int(metrics.get("params", 0)),
        "state_bytes_per_token": 0,
        "state_bytes_fixed": 0,
        "flops_per_token": 0,
        "ancestry": _ancestry(store, record),
        "operator_credit": credit,
        "ladder": individual_ladder(store, record.run_id, record.id),
    }


def genome_diff(a: Genome, b: Genome) -> list[dict[str, Any]]:
    """Region-by-region differences: settings, bases (kind and params) and edges."""
    changes: list[dict[str, Any]] = []
    regions_a = {r.id: r for r in a.regions}
    regions_b = {r.id: r for r in b.regions}
    for rid in sorted(set(regions_a) | set(regions_b)):
        ra, rb = regions_a.get(rid), regions_b.get(rid)
        if ra is None or rb is None:
            changes.append({"where": rid, "a": ra.type if ra else None, "b": rb.type if rb else None})
            continue
        sa, sb = ra.settings_dict, rb.settings_dict
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                changes.append({"where": f"{rid}.{key}", "a": sa.get(key), "b": sb.get(key)})
        for j in range(max(len(ra.bases), len(rb.bases))):
            ba = ra.bases[j] if j < len(ra.bases) else None
            bb = rb.bases[j] if j < len(rb.bases) else None
            if ba != bb:

                def show(base: Any) -> Any:
                    return None if base is None else f"{base.type}:{base.gene.kind}{base.gene.as_dict}"

                changes.append({"where": f"{rid}/{j}", "a": show(ba), "b": show(bb)})
    edges_a = {(e.source, e.target, e.kind) for e in a.edges}
    edges_b = {(e.source, e.target, e.kind) for e in b.edges}
    for e in sorted(edges_a ^ edges_b):
        changes.append(
            {
                "where": f"edge {e[0]}->{e[1]}",
                "a": e[2] if e in edges_a else None,
                "b": e[2] if e in edges_b else None,
            }
        )
    return changes


def environment_failures(
    store: Store, run_id: str, individuals: list[IndividualRecord] | None = None
) -> dict[str, Any]:
    """The run's environment failures (`evaluation.environment`: the machine's, not the
    genome's), kept apart from the genomes' failures: ``attempts`` that failed so (its
    leases, `store.LeaseLog`: each was retried, or stopped the run before anything about its
    genome was stored), of how many ``evaluations``, ``recorded`` evaluation rows marked so
    (none from a search, which stops instead; a pool outside the engine may store one),
    and the most frequent ``causes`` (cause -> attempts). ``individuals``: the run's births
    when the caller has read them already."""
    leases = [x for x in store.leases(run_id) if is_environment_reason(x.reason)]
    births = store.individuals(run_id) if individuals is None else individuals
    recorded = sum(
        1
        for i in births
        for e in i.evaluations
        if e.individual_id == i.id and is_environment_reason(e.reason)
    )
    causes: dict[str, int] = {}
    for lease in leases:
        cause = (lease.reason or "")[len(ENVIRONMENT_MARK) :].split("; gave up")[0].strip()
        causes[cause] = causes.get(cause, 0) + 1
    top = dict(sorted(causes.items(), key=lambda kv: -kv[1])[:5])
    keys = {natural_key(x) for x in leases}
    return {"attempts": len(leases), "evaluations": len(keys), "recorded": recorded, "causes": top}


def environment_text(environment: dict[str, Any]) -> str:
    """One line on a run's environment failures (`environment_failures`)."""
    if not environment["attempts"] and not environment["recorded"]:
        return "environment failures: none"
    cause = next(iter(environment["causes"]), "")
    return (
        f"environment failures (the machine's, not counted against any genome): {environment['attempts']} "
        f"attempts at {environment['evaluations']} evaluations"
        + (f", {environment['recorded']} recorded" if environment["recorded"] else "")
        + (f"; most often: {cause}" if cause else "")
    )


def run_report(store: Store, run_id: str) -> dict[str, Any]:
    """Per generation: births, evaluations, failures, and the population the run selects
    from: `best_quality` and `mean_quality` (the fitness's quality over its members),
    `best_per_task` (the per-task values of its best member), `mean_per_task`, `families`
    (distinct design families); the best quality born that generation; failure types;
    `filtered`: births the pre-filter stopped (`SearchSpace.prefilter`; never trained, so
    neither `evaluated` nor `failed`, nor in `failures` or `compute`); `failures` are the
    genomes' own (by status), `environment_failures` the machine's (`environment_failures`);
    `compute` (`compute_totals`), per generation and for the run; `ledger`
    (`ledger.run_ledger`): per generation and in total, what the real evaluations trained,
    their seconds, FLOP/s and peak memory. `transfer`: the fidelity
    transfer per generation of a multi-fidelity run (`evolution.transfer_audit`), and
    `transfer_warning` when its Spearman ρ is below 0.3."""
    from dogma_evolve.evolution.objectives import quality_of
    from dogma_evolve.evolution.rules import stored_result
    from dogma_evolve.evolution.study.stored_run import StoredRun

    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id}")
    stored = StoredRun.open(store, run_id)  # config and space read once, the best by its rule
    config, space = stored.config, stored.space
    individuals = store.individuals(run_id)
    generations = []
    failures: dict[str, int] = {}
    operators: dict[str, int] = {}
    compute = compute_totals(individuals, run.task, len(config.tasks) > 1)
    for g in range(run.generations):
        born = [i for i in individuals if i.generation == g]
        own = [i for i in born if i.evaluation is not None and i.evaluation.individual_id == i.id]
        evaluated = [i for i in own if i.status != FILTERED]
        for i in evaluated:
            if i.status is not None and i.status != "ok" and not _environmental(i):
                failures[i.status] = failures.get(i.status, 0) + 1
        for i in born:
            if i.operator:
                operators[i.operator] = operators.get(i.operator, 0) + 1
        members = store.population(run_id, g)
        results = [stored_result([e for e in m.evaluations if e.task == run.task]) for m in members]
        scored = [(quality_of(metrics) if status == "ok" else 0.0, metrics) for status, metrics, _ in results]
        best_quality, best = max(scored, key=lambda qm: qm[0], default=(0.0, None))
        tasks = sorted({t for _, m in scored for t in (m.get("per_task") or {})})
        mean_per_task = {
            t: sum(float((m.get("per_task") or {}).get(t, 0.0)) for _, m in scored) / len(scored)
            for t in tasks
        }
        generations.append(
            {
                "generation": g,
                "born": len(born),
                "evaluated": len(evaluated),
                "failed": sum(i.status != "ok" for i in evaluated),
                "filtered": len(own) - len(evaluated),
                "best_quality": best_quality,
                "mean_quality": sum(q for q, _ in scored) / len(scored) if scored else 0.0,
                "best_per_task": dict((best.get("per_task") or {}) if best else {}),
                "mean_per_task": mean_per_task,
                "best_born_quality": max(
                    (quality_of(i.metrics or {}) for i in born if i.status == "ok"), default=0.0
                ),
                "families": len({space.family(space.parse(m.yaml)) for m in members}),
                "compute": compute.get(g, _no_compute()),
            }
        )
    transfer = run_transfer(store, run_id, config, space, individuals)
    try:  # the run's best by the rule every reader shares (`StoredRun.best`)
        best_record = record_summary(best_individual(store, run_id, stored), space)
    except UsageError:  # nothing evaluated successfully yet
        best_record = None
    finalists = []
    if stored.stored_config.get("select_by") == "long":  # what chose the best (`study.finalists`)
        from dogma_evolve.evolution.study.finalists import finalist_results

        finalists = finalist_results(stored)
    return {
        "best": best_record,
        "finalists": finalists,
        "filtered": sum(g["filtered"] for g in generations),
        **ladder_summary(store, run_id),
        "run_id": run_id,
        "status": run.shown_status,  # `interrupted`: stored running, but nobody drives it
        "stop_reason": run.stop_reason,
        "task": run.task,
        "config": run.config,
        "generations": generations,
        "failures": failures,
        "environment_failures": environment_failures(store, run_id, individuals),
        "operators": operators,
        "compute": _total(compute.values(), table=table_space(space)),
        "ledger": run_ledger(
            individuals, run.task, len(config.tasks) > 1, run.generations, not table_space(space)
        ),
        "transfer": transfer,
        "transfer_warning": transfer_warning(transfer),
    }


def run_transfer_summary(stored: Any) -> dict[str, Any]:
    """What `evolve run` adds to its summary, read from the stored run (a `StoredRun`):
    `transfer` (the run's latest fidelity transfer row, None for a single-fidelity run) and
    `transfer_warning`."""
    if TransferAudit.of(stored.config, stored.space) is None:  # a single-fidelity run
        return {"transfer": None, "transfer_warning": None}
    rows = run_transfer(stored.store, stored.run_id, stored.config, stored.space)
    return {"transfer": rows[-1] if rows else None, "transfer_warning": transfer_warning(rows)}


COMPUTE_METRICS = ("train_tokens", "train_flops")


def _no_compute() -> dict[str, Any]:
    return {"train_tokens": 0, "train_flops": 0, "evaluations": 0, "failed": 0, "without": {}}


def compute_totals(individuals: list[IndividualRecord], task: str, several_tasks: bool) -> dict[int, dict]:
    """Training compute per generation of birth, over the run's REAL evaluations: rows of
    its births that are neither copied from another run (`metrics["cached_from"]`: a cache
    hit trains nothing), nor `filtered` rows (never trained), nor, with several tasks, the
    run's per-task-mean row on `task` (`ledger.real_evaluations`, what
    `Evaluator.count_spent` counts). Each: `train_tokens` and `train_flops` summed over the
    rows that record them, `evaluations`, `failed` (of those, not ok: a failure records no
    compute) and `without` (metric -> rows lacking it: failures, and rows written before
    the trainer recorded compute)."""
    out: dict[int, dict] = {}
    for generation, e in real_evaluations(individuals, task, several_tasks):
        metrics = e.metrics or {}
        bucket = out.setdefault(generation, _no_compute())
        bucket["evaluations"] += 1
        bucket["failed"] += e.status != "ok"
        for name in COMPUTE_METRICS:
            value = metrics.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                bucket[name] += value
            else:
                bucket["without"][name] = bucket["without"].get(name, 0) + 1
    return out


def _total(buckets: Any, table: bool) -> dict[str, Any]:
    total = _no_compute()
    for bucket in buckets:
        for key in ("train_tokens", "train_flops", "evaluations", "failed"):
            total[key] += bucket[key]
        for name, count in bucket["without"].items():
            total["without"][name] = total["without"].get(name, 0) + count
    total["measured"] = not table
    return total


def human(value: float) -> str:
    """A count in 3 significant digits with an SI prefix: 61.4k, 1.23G."""
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}"
    return f"{value:.3g}"


def compute_cells(compute: dict[str, Any]) -> tuple[str, str]:
    """A generation's (tokens, FLOPs) for the report's table: "-" where none recorded it."""
    cells = []
    for name in COMPUTE_METRICS:
        recorded = compute["evaluations"] - compute["without"].get(name, 0)
        cells.append(human(compute[name]) if recorded else "-")
    return cells[0], cells[1]


def _environmental(record: IndividualRecord) -> bool:
    """Whether a stored individual's run-task evaluation failed for its environment."""
    return record.evaluation is not None and is_environment_reason(record.evaluation.reason)


def report_lines(data: dict[str, Any]) -> list[str]:
    """The run's compute and fidelity transfer as text lines (after the report's table)."""
    from dogma_evolve.evolution.objectives import quality_of, seeds_text

    c = data["compute"]
    if not c["measured"]:
        lines = [
            f"compute: not recorded: the {data['config'].get('space')} space's {c['evaluations']} "
            "evaluations are table look-ups, and the table gives no training tokens or FLOPs"
        ]
    else:
        lines = [
            f"compute: {c['train_tokens']:,} training tokens, {c['train_flops']:.3g} training FLOPs "
            f"over {c['evaluations']} real evaluations (cache hits excluded)"
        ]
        lacking = max(c["without"].values(), default=0)
        if lacking:
            old = lacking - c["failed"]
            lines.append(
                f"  {lacking} of them record no compute ({c['failed']} failed"
                + (f", {old} written before compute was recorded" if old > 0 else "")
                + "): the totals cover the rest"
            )
    if data.get("filtered"):
        lines.append(
            f"filtered: {data['filtered']} births stopped by the pre-filter before training "
            "(they cannot beat chance by construction; not failures, no evaluation spent)"
        )
    if data["transfer"]:
        last = data["transfer"][-1]
        by = last.get("ranked_by", "quality")
        lines.append(
            f"fidelity transfer ({ranked_text(by)} after {last['lower_fidelity']} steps, what the first "
            f"stage promotes by, vs quality after {last['higher_fidelity']}; candidates trained at both, "
            "cumulative; 95% bootstrap intervals):"
        )
        for t in data["transfer"]:
            lines.append(
                f"  gen {t['generation']}: {correlation_text(t)}"
                + ("" if t["stored"] else " (computed on read)")
                + ("" if t.get("ranked_by", "quality") == by else f" (by {ranked_text(t['ranked_by'])})")
            )
    if data["transfer_warning"]:
        lines.append(data["transfer_warning"])
    lines += ladder_lines(
        data.get("ladder") or [],
        data.get("ladder_transfer") or [],
        data.get("ladder_warning"),
        data.get("ladder_regime"),
        data.get("ladder_verdict"),
    )
    if data.get("finalists"):
        lines.append("finalists (--select-by long; the best after the long training is the run's best):")
        for f in data["finalists"]:
            after = (
                f"{f['quality']:.4f}" if f["quality"] is not None else str(f["status"] or "not trained yet")
            )
            lines.append(
                f"  individual {f['individual_id']} ({f['genome_id'][:12]}): quality "
                f"{f['search_quality']:.4f} in the search, {after} after {f['steps']:,} steps"
            )
    best = data.get("best")
    if best is not None:
        lines.append(
            f"best: individual {best['id']} ({best['genome_id'][:12]}), quality "
            f"{quality_of(best['metrics']):.4f}{seeds_text(best['metrics'])}: {best['sequence']}"
        )
    return lines
