"""The `evolve scale TARGET` command: parse, plan the ladders, train what the store lacks, fit
and print (`evolution.scale.train` has the logic, `evolution.scale.ladder` the ladders).

Bad input, and a ladder that cannot determine a fit, exit 2 with one line on stderr before a
store or a run is created; progress goes to stderr, one line per trained point.

The training side (`evolution.scale.train`, the tasks, the store's individuals) loads torch,
so the handlers import it when they run: every `evolve` command builds this parser."""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from dogma_evolve.evaluation.scaling import LadderError, min_boot
from dogma_evolve.evolution.cli import output
from dogma_evolve.evolution.cli.progress import ladder_point_printer
from dogma_evolve.evolution.cli.tasks import (
    add_plugin_option,
    genome_refusal,
    import_stored_plugins,
    load_plugin_option,
    pin_task_option,
)
from dogma_evolve.evolution.cli.training import add_training_options, check_training_options
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.scale.defaults import (
    DEFAULT_MINUTES,
    DEFAULT_SEEDS,
    DEFAULT_TASK,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOKENS_PER_PARAM,
)
from dogma_evolve.evolution.scale.ladder import AXES, Design
from dogma_evolve.genome import Genome, GenomeError, load_genome

SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def count(text: str) -> float:
    """A count: ``250000``, ``2.5e5``, ``250k``, ``1.3B`` (its sign and size are checked later,
    with the other options, as one line)."""
    t = text.strip().lower().replace("_", "")
    scale = SUFFIXES.get(t[-1:], 1.0)
    try:
        value = float(t[:-1] if t[-1:] in SUFFIXES else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number (e.g. 250000, 2.5e5, 250k, 1.3B)"
        ) from None
    return value


def counts(text: str) -> list[float]:
    return [count(part) for part in text.split(",") if part.strip()]


def add_scale_command(sub: Any, common: argparse.ArgumentParser) -> None:
    scale = sub.add_parser(
        "scale",
        parents=[common],
        help="train a size ladder of one design and fit L(N) = E + A·N^-α",
        description="Train a ladder of sizes of one design (TARGET: an individual id or genome-id "
        "prefix, a genome file, or preset:NAME) on a language-modelling task, record it as a run "
        "in the store, and fit how the loss falls with parameters.",
    )
    scale.add_argument("target", help="individual id or genome-id prefix, genome FILE, or preset:NAME")
    scale.add_argument(
        "--axis",
        choices=AXES,
        default="both",
        help="what grows: width and depth together (default), one of them",
    )
    scale.add_argument(
        "--sizes",
        type=counts,
        metavar="N[,N...]",
        help="non-embedding parameter targets, comma-separated (e.g. 1e4,3e4,1e5,3e5 or 10M,100M,1B,10B; "
        "default: 5 sizes up to what the text allows)",
    )
    scale.add_argument(
        "--task",
        default=DEFAULT_TASK,
        metavar="NAME",
        help=f"task (default {DEFAULT_TASK}: the KJV and Wikipedia articles; bytelm:PATH for your own "
        "text; MODULE:CLASS[?key=value&...] for your own task)",
    )
    budget = scale.add_mutually_exclusive_group()
    budget.add_argument(
        "--tokens-per-param",
        type=counts,
        metavar="R[,R...]",
        help=f"training tokens per parameter (default {DEFAULT_TOKENS_PER_PARAM:g}); several: L(N, D) too",
    )
    budget.add_argument(
        "--tokens",
        type=counts,
        metavar="D[,D...]",
        help="a fixed token count for every size (several: L(N, D))",
    )
    scale.add_argument(
        "--seeds",
        type=int,
        default=DEFAULT_SEEDS,
        metavar="K",
        help=f"seeds per size (default {DEFAULT_SEEDS})",
    )
    scale.add_argument(
        "--minutes",
        type=float,
        default=DEFAULT_MINUTES,
        metavar="M",
        help=f"without --tokens-per-param/--tokens: lower the default {DEFAULT_TOKENS_PER_PARAM:g} tokens "
        f"per parameter (to 10, 5, 2.5) until a short probe projects the ladder within M minutes here "
        f"(default {DEFAULT_MINUTES:g}; 0, or with --ray-address: always {DEFAULT_TOKENS_PER_PARAM:g})",
    )
    scale.add_argument("--against", metavar="OTHER", help="a second design: fit both and compare them")
    scale.add_argument(
        "--boot", type=int, default=1000, metavar="B", help="bootstrap replicates of the fit (default 1000)"
    )
    add_plugin_option(scale)
    add_training_options(scale, DEFAULT_TIMEOUT_S)
    scale.set_defaults(func=cmd_scale)


# -- the command ------------------------------------------------------------------------------
def _design(target: str, store_url: str, pinned: dict[str, Any], plugins: tuple[str, ...] = ()) -> Any:
    """The ``Design`` of a target: preset, genome file, or an individual of the store."""
    if target.startswith("preset:") or os.path.exists(target) or target.endswith((".yaml", ".yml")):
        try:
            genome = load_genome(target)
        except GenomeError as e:
            raise genome_refusal(target, e, plugins) from None
        return Design.of(genome, pinned, target, preset=target.startswith("preset:"))
    from dogma_evolve.evolution.report.summary import resolve_individual  # torch (phenotype's accounting)

    with output.open_store(store_url) as store:  # an individual: its store must exist
        record = resolve_individual(store, target)
        run = store.get_run(record.run_id)
    if run is not None:  # its run's block kinds, pinned to the code it was made with
        import_stored_plugins(run.config, f"scaling individual {record.id}")
    return Design.of(Genome.from_yaml(record.yaml), pinned, f"individual {record.id}")


def _check(args: argparse.Namespace) -> None:
    check_training_options(args)
    if not (math.isfinite(args.minutes) and 0 <= args.minutes <= 100_000):
        raise UsageError(f"--minutes {args.minutes:g}: from 0 (no time budget) to 100000")
    if not min_boot(0.95) <= args.boot <= 100_000:
        raise UsageError(f"--boot {args.boot}: from {min_boot(0.95)} to 100000")
    for name in ("tokens_per_param", "tokens", "sizes"):
        values = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if values is not None and not values:
            raise UsageError(f"{flag} needs at least one number")
        bad = next((v for v in values or () if not (math.isfinite(v) and v >= 1e-3)), None)
        if bad is not None:
            raise UsageError(f"{flag}: {bad:g} is not a positive number")


def plans(args: argparse.Namespace) -> list[Any]:
    """The ladder of TARGET and, with ``--against``, OTHER's at the same sizes; every
    refusal is a one-line ``UsageError``. Without ``--tokens-per-param`` or ``--tokens`` the
    tokens per parameter are the default's, lowered until the ladder's projected time here
    fits ``--minutes`` (`evolution.scale.pace`; ``args.default_budget`` says what was chosen)."""
    from dogma_evolve.evaluation.tasks import get_task  # torch, as the training side below
    from dogma_evolve.evolution.scale.train import Budget

    _check(args)
    args.task = pin_task_option(args.task)  # a user's task: imported and pinned, named on stderr
    load_plugin_option(args.plugins, contract=True)  # a user's block kinds, as `evolve run`'s
    try:
        task = get_task(args.task)
    except ValueError as e:
        raise UsageError(str(e)) from None
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    args.default_budget = None
    if args.tokens is not None:
        return _plans(args, pinned, [Budget(tokens=round(t)) for t in args.tokens])
    ratios = args.tokens_per_param or [DEFAULT_TOKENS_PER_PARAM]
    if args.tokens_per_param is not None or not args.minutes or args.ray_address:  # a cluster: no probe
        return _plans(args, pinned, [Budget(per_param=r) for r in ratios])
    from dogma_evolve.evolution.scale.pace import RATIOS, choose

    first = _plans(args, pinned, [Budget(per_param=RATIOS[0])])

    def plans_at(r: float) -> list[Any]:  # the 20-token ladder's sizes, fewer tokens
        if r == RATIOS[0]:
            return first
        sizes = [[rung.params for rung in plan.rungs] for plan in first]
        return _plans(args, pinned, [Budget(per_param=r)], sizes)

    chosen, args.default_budget = choose(
        plans_at, lambda ps: _stored(args.store, ps), args.minutes, args.workers
    )
    return chosen


def _stored(url: str, plans: list[Any]) -> bool:
    """Whether the store at ``url`` holds the run of ``plans``' first ladder."""
    from dogma_evolve.store.records import StoreError

    key = plans[0].ladder_key()
    try:
        with output.open_reader(url) as store:
            return any(r.config.get("ladder") == key for r in store.list_runs("scale"))
    except StoreError:  # no store yet (or one this command will refuse when it opens it)
        return False


def _plans(
    args: argparse.Namespace,
    pinned: dict[str, Any],
    budgets: list[Any],
    sizes: list[list[float]] | None = None,
) -> list[Any]:
    """TARGET's plan under ``budgets`` (and OTHER's with ``--against``), at ``sizes`` (one
    list per plan) instead of the given or default sizes when set."""
    from dogma_evolve.evolution.scale.train import make_plan

    try:
        design = _design(args.target, args.store, pinned, args.plugins)
        own = sizes[0] if sizes else args.sizes
        out = [make_plan(design, args.axis, args.task, own, budgets, args.seeds, args.timeout)]
        if args.against:  # OTHER at TARGET's sizes, as near as its axis allows
            other = _design(args.against, args.store, pinned, args.plugins)
            if sizes:
                out.append(
                    make_plan(other, args.axis, args.task, sizes[1], budgets, args.seeds, args.timeout)
                )
            else:
                given = args.sizes is not None
                at = args.sizes or [r.params for r in out[0].rungs]
                try:
                    out.append(
                        make_plan(other, args.axis, args.task, at, budgets, args.seeds, args.timeout, given)
                    )
                except LadderError:
                    if given:
                        raise
                    # its own default ladder; the overlap with TARGET's is checked below
                    out.append(
                        make_plan(other, args.axis, args.task, None, budgets, args.seeds, args.timeout)
                    )
    except LadderError as e:
        raise UsageError(str(e)) from None
    if len(out) > 1:
        if out[0].ladder_key() == out[1].ladder_key():
            raise UsageError(f"--against {args.against} is the same ladder as {args.target}")
        (a_lo, a_hi), (b_lo, b_hi) = ((p.rungs[0].params, p.rungs[-1].params) for p in out)
        if max(a_lo, b_lo) >= min(a_hi, b_hi):
            raise UsageError(
                f"the ladders share no sizes ({a_lo:,}-{a_hi:,} and {b_lo:,}-{b_hi:,} parameters): "
                "a comparison would extrapolate; give --sizes"
            )
    for plan in out:
        plan.plugin_code = _plugin_code(plan)
    return out


def _plugin_code(plan: Any) -> dict[str, dict[str, Any]]:
    """The records of the plugins loaded here (``--plugin``, or a stored individual's run's)
    whose kinds the ladder's genomes hold: what its run records (`Plan.plugin_code`)."""
    from dogma_evolve.phenotype.plugins import load, pinned_loaded, used_by  # torch, as the training

    return {text: load(text) for text in used_by(pinned_loaded(), plan.rungs[0].genome.to_yaml())}


def cmd_scale(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.scale.train import (  # torch
        Recorder,
        comparison_dict,
        plan_summary,
        train_recorded,
    )
    from dogma_evolve.evolution.training_run import lookup_all

    ladders = plans(args)  # every check, before the store is opened for writing
    err = output.err()
    quiet = args.quiet
    started = time.perf_counter()
    store = output.open_store(args.store, create=True)
    try:
        recorders = [Recorder(store, plan) for plan in ladders]
        todo = lookup_all(recorders)
        if not quiet:
            if args.default_budget is not None:
                err.print(f"budget: {args.default_budget.message()}")
            for rec in recorders:
                _announce(err, rec)
        try:
            train_recorded(
                recorders,
                todo,
                lambda: _pool(args, store, todo),
                None if quiet else ladder_point_printer(err, started),
            )
        except ConnectionError as e:  # e.g. --ray-address that nothing answers at
            raise UsageError(str(e)) from None
        try:
            results = [plan_summary(rec.plan, args.boot) for rec in recorders]
            data, fit = results[0]
            if len(results) > 1:
                data["other"] = results[1][0]
                data["comparison"] = comparison_dict(fit, results[1][1], ladders[0], results[1][0])
        except LadderError as e:
            raise UsageError(str(e)) from None
    finally:
        store.close()
    data["trained"] = len(todo)
    data["default_budget"] = None if args.default_budget is None else args.default_budget.to_dict()
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        output.emit_json(data)
    else:
        _print(data)
    return 0


def _pool(args: argparse.Namespace, store: Any, todo: list[Any]) -> Any:
    """The Ray pool of `evolve run`, its leases logged to each point's run (tests replace it)."""
    from dogma_evolve.evolution.scale.train import ladder_pool  # torch and Ray

    return ladder_pool(store, todo, args.workers, args.ray_address, args.timeout)


def _announce(err: Console, rec: Any) -> None:
    plan = rec.plan
    sizes = [r.params for r in plan.rungs]
    have = sum(p.status is not None for p in plan.points)
    budgets = ", ".join(b.label() for b in plan.budgets)
    err.print(
        f"scale {plan.source} along {plan.axis}: {len(sizes)} sizes {sizes[0]:,} … {sizes[-1]:,} "
        f"non-embedding params ({plan.rungs[0].total_params:,} … {plan.rungs[-1].total_params:,} in all) "
        f"× {plan.seeds} seeds, {budgets}, on {plan.task}; run {rec.run_id}"
        f"{' (resumed)' if rec.resumed else ''}: {have} of {len(plan.points)} points stored"
    )
    if plan.regime is not None:
        err.print(f"regime: {plan.regime.message}")
    for warning in plan.warnings:
        err.print(f"WARNING: {warning}")


def _num(v: float) -> str:
    return "0" if abs(v) < 1e-9 else f"{v:.4g}"  # a floor fitted at its bound prints as 0


def _ci(v: float, ci: list[float]) -> str:
    return f"{_num(v)} [{_num(ci[0])}, {_num(ci[1])}]"


def _print_ladder(out: Console, data: dict[str, Any]) -> None:
    table = Table(title=f"{data['target']} along {data['axis']} on {data['task']} (run {data['run_id']})")
    cols = ("N", "total", "width", "depth", "lr", "seed", "steps", "tokens", "epochs", "loss", "residual")
    for col in (*cols, "from"):
        table.add_column(col, justify="right" if col != "from" else "left")
    for p in data["points"]:
        table.add_row(
            f"{p['params']:,}",
            f"{p.get('total_params') or 0:,}",
            str(p["width"]),
            str(p["depth"]),
            f"{p['lr']:.3g}",
            str(p["replicate"]),
            f"{p['steps']:,}",
            f"{p['tokens']:,}",
            "-" if p.get("epochs") is None else f"{p['epochs']:.2f}",
            "-" if p["loss"] is None else f"{p['loss']:.4f}",
            "-" if p["residual"] is None else f"{p['residual']:+.4f}",
            p["origin"] if p["status"] == "ok" else f"{p['origin']} ({p['status']})",
        )
    out.print(table)
    f = data["fit"]
    for warning in data["warnings"]:
        out.print(f"WARNING: {warning}")
    regime = data.get("regime")
    if regime:
        out.print(f"regime: {regime['message']}")
    law = (
        "L(N) = E + A·N^-α"
        if not regime or regime["scaling_law"]
        else "L(N) at fixed data (not a scaling law)"
    )
    out.print("N: non-embedding parameters (Kaplan et al. 2020); total: with the embeddings and head")
    out.print(
        f"{law}: E {_ci(f['E'], f['E_ci'])}, A {_ci(f['A'], f['A_ci'])}, "
        f"α {_ci(f['alpha'], f['alpha_ci'])} ({f['confidence']:.0%} intervals, {f['n_boot']} bootstrap "
        f"replicates); residual RMS {f['residual']:.4f} over {f['n_points']} points"
    )
    surface = data.get("surface")
    if surface and "refused" in surface:
        out.print(f"L(N, D): not determined: {surface['refused']}")
    elif surface:
        out.print(
            f"L(N, D) = E + A·N^-α + B·D^-β: E {surface['E']:.4g}, "
            f"α {_ci(surface['alpha'], surface['alpha_ci'])}, β {_ci(surface['beta'], surface['beta_ci'])}, "
            f"residual RMS {surface['residual']:.4f}"
        )


def _print(data: dict[str, Any]) -> None:
    out = output.out()
    if not out.is_terminal:  # a log or a pipe: the table's natural width, not 80 columns
        out.width = 160
    _print_ladder(out, data)
    if "comparison" in data:
        out.print()
        _print_ladder(out, data["other"])
        c = data["comparison"]
        lo, hi = c["params_range"]
        basis = c["basis"]
        rule = (
            f"D = {basis['tokens_per_param']:g}·N"
            if "tokens_per_param" in basis
            else f"D = {basis['tokens']:,}"
        )
        out.print()
        out.print(
            f"{data['other']['target']} against {data['target']} at matched compute ({rule}, "
            f"N {lo:,.0f} … {hi:,.0f}, C {c['compute_range'][0]:.3g} … {c['compute_range'][1]:.3g} FLOPs):"
        )
        out.print(
            f"  loss gap (other − this) {c['loss_gap']:+.4f} mean over log N, {c['loss_gap_mid']:+.4f} "
            f"[{c['loss_gap_mid_ci'][0]:+.4f}, {c['loss_gap_mid_ci'][1]:+.4f}] at the middle size"
        )
        beta = "undefined" if c["beta"] is None else f"{c['beta']:.3g}"
        out.print(f"  sample-efficiency factor β {beta} (the other needs β× the data for this one's loss)")
        cross = c["crossover_params"]
        out.print(
            "  crossover: "
            + ("none in [1, 1e24]" if cross is None else f"{cross:,.3g} params")
            + f" (interval {c['crossover_ci'][0]:.3g} … {c['crossover_ci'][1]:.3g})"
        )
        for note in c["notes"]:
            out.print(f"  note: {note}")
    out.print(f"{data['trained']} points trained in {data['wall_seconds']} s")
