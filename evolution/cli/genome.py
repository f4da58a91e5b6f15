"""`evolve genome show|validate`: a genome's sequence view, its accounting (`--breakdown`:
per component, `phenotype.breakdown`), its validity.

`validate` reads the genome as data (`genome` is torch-free) and loads no torch; `show`
computes an accounting, so it imports `phenotype` (torch) when it runs. Both take
``--plugin MODULE`` (`evolution.cli.tasks.load_plugin_option`): a user's block kinds,
imported (torch) before the genome is read, so that a genome holding them validates and is
accounted; without it such a genome is refused in one line that names ``--plugin``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.cli.output import emit_json, out
from dogma_evolve.evolution.cli.tasks import add_plugin_option, genome_refusal, load_plugin_option
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.genome import Genome, GenomeError, load_genome

if TYPE_CHECKING:
    from dogma_evolve.phenotype.breakdown import Breakdown


def _load(args: argparse.Namespace) -> Genome:
    """The genome ``args.source``, once the ``--plugin`` modules are imported."""
    load_plugin_option(args.plugins, contract=False)
    try:
        return load_genome(args.source)
    except GenomeError as e:
        raise genome_refusal(args.source, e, args.plugins) from None


def cmd_genome_show(args: argparse.Namespace) -> int:
    from dogma_evolve.phenotype import account  # torch: only `show` computes an accounting

    if args.seq_len < 1 or args.batch < 1:
        raise UsageError(f"--seq-len and --batch must be at least 1, got {args.seq_len} and {args.batch}")
    if args.breakdown and args.format == "yaml":
        raise UsageError("--breakdown prints tables, --format yaml the genome: choose one")
    genome = _load(args)
    if args.breakdown:
        return _show_breakdown(genome, args)
    acct = account(genome, args.seq_len)
    if args.json:
        emit_json({"genome_id": genome.id, "sequence": genome.sequence_view(), **acct.to_dict()})
        return 0
    if args.format == "yaml":
        sys.stdout.write(genome.to_yaml())
        return 0
    console = out()
    console.print(f"genome    {genome.id}")
    console.print(f"sequence  {genome.sequence_view()}")
    for key, value in acct.to_dict().items():
        console.print(f"{key:<22}{value:,}")
    return 0


def _show_breakdown(genome: Genome, args: argparse.Namespace) -> int:
    from dogma_evolve.phenotype.breakdown import breakdown  # torch, as `account`
    from dogma_evolve.phenotype.chapter_compare import applies, compare

    b = breakdown(genome, args.seq_len, args.batch)
    chapter = compare(genome, b) if applies(genome) else None
    if args.json:
        data = {"genome_id": genome.id, "sequence": genome.sequence_view(), **b.to_dict()}
        emit_json({**data, "chapter": chapter} if chapter else data)
        return 0
    console = out()
    console.print(f"genome    {genome.id}")
    console.print(f"sequence  {genome.sequence_view()}")
    for line in breakdown_lines(b):
        console.print(line)
    if chapter:
        for line in chapter_lines(chapter):
            console.print(line)
    return 0


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Columns aligned: the first to the left, the others to the right."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]
        return "  ".join(cells).rstrip()

    return [line(header), *(line(r) for r in rows)]


def breakdown_lines(b: Breakdown) -> list[str]:
    """The breakdown as text: the components (Table 15.2's shape), then FLOPs per block."""
    from dogma_evolve.phenotype.breakdown import si  # torch, as `account`

    t = b.totals

    def share(n: int, total: int) -> str:
        return f"{100 * n / total:.1f}%" if total else "-"

    rows = [
        (
            c.component,
            str(c.instances),
            f"{c.params:,}",
            share(c.params, t.params),
            f"{c.flops_per_token:,}",
            share(c.flops_per_token, t.flops_per_token),
            f"{c.state_bytes:,}",
        )
        for c in b.components
    ]
    rows.append(("total", "", f"{t.params:,}", "", f"{t.flops_per_token:,}", "", f"{b.state_bytes:,}"))
    header = ("component", "count", "params", "%", "FLOPs/token", "%", f"state bytes (T={b.seq_len})")
    lines = [
        "",
        f"by component, at seq_len {b.seq_len} ({t.layers} layers; count: a component's layers, "
        "norms or edges; state: inference state per sequence)",
        *_table(header, rows),
    ]
    if t.active_params != t.params:
        lines.append(f"active params per token: {t.active_params:,}")
    per_block = b.per_block()
    lines += ["", f"FLOPs per block, one forward pass of B={b.batch} x T={b.seq_len} tokens"]
    block_rows = [(n, str(k), si(f), si(a)) for n, k, f, a in per_block.rows]
    lines += _table(("component", "layers", "per layer (mean)", "all layers"), block_rows)
    if per_block.flops_per_block is not None:
        lines.append(f"per block ({per_block.blocks} blocks): {si(per_block.flops_per_block)}")
    else:
        lines.append("per block: none (the components do not repeat the same number of times)")
    lines.append(f"all blocks: {si(per_block.flops_all_blocks)}")
    lines.append(f"forward pass, with the head: {si(b.forward_flops(t.flops_per_token))}")
    return lines


def chapter_lines(chapter: dict[str, Any]) -> list[str]:
    """The chapter's figures beside ours, each difference with its sentence."""
    from dogma_evolve.phenotype.breakdown import si  # torch, as `account`

    lines = [
        "",
        f"beside the chapter ({chapter['source']}); the chapter calls its allocation hypothetical, "
        "ours are computed from the built modules",
    ]
    tables = [("parameters, Table 15.2", chapter["allocation"], False)]
    if chapter["per_block_flops"] is not None:
        tables.append(("FLOPs per block at (B=4, T=512), §15.6.5", chapter["per_block_flops"], True))
    for title, rows, flops in tables:
        if flops:
            header = ("component", "line", "chapter", "its formula", "ours")
            cells = [
                (
                    r["component"],
                    str(r["line"] or "-"),
                    r["printed"],
                    "-" if r["formula"] is None else si(r["formula"]),
                    f"{r['ours'] / 1e9:.2f}B",
                )
                for r in rows
            ]
        else:
            header = ("component", "line", "chapter", "ours", "ours, exact")
            cells = [
                (
                    r["component"],
                    str(r["line"] or "-"),
                    r["printed"],
                    f"{r['ours'] / 1e6:.2f}M",
                    f"{r['ours']:,}",
                )
                for r in rows
            ]
        lines += ["", title, *_table(header, cells)]
        lines += [f"  {r['component']}: {r['sentence']}." for r in rows if r["sentence"]]
    if chapter["per_block_flops"] is None:
        lines += ["", f"FLOPs per block: {chapter['per_block_flops_note']}"]
    return lines


def cmd_genome_validate(args: argparse.Namespace) -> int:
    genome = _load(args)
    if args.json:
        emit_json({"valid": True, "genome_id": genome.id})
    else:
        out().print(f"valid: {genome.id}")
    return 0


def add_genome_command(sub: Any, common: argparse.ArgumentParser) -> None:
    genome = sub.add_parser("genome", help="show or validate a genome")
    gsub = genome.add_subparsers(dest="genome_command", required=True)
    show = gsub.add_parser("show", parents=[common], help="sequence view and accounting")
    show.add_argument("source", help="FILE or preset:NAME")
    show.add_argument("--format", choices=("text", "yaml"), default="text")
    show.add_argument("--seq-len", type=int, default=2048, help="context for FLOPs and state (2048)")
    show.add_argument(
        "--breakdown",
        action="store_true",
        help="parameters, FLOPs and state per component, and FLOPs per block "
        "(preset:dogma-byte: beside the chapter's allocation study)",
    )
    show.add_argument(
        "--batch", type=int, default=4, help="sequences per forward pass of the per-block FLOPs (4)"
    )
    add_plugin_option(show)
    show.set_defaults(func=cmd_genome_show)
    validate = gsub.add_parser("validate", parents=[common], help="exit 0 if valid, 2 if not")
    validate.add_argument("source", help="FILE or preset:NAME")
    add_plugin_option(validate)
    validate.set_defaults(func=cmd_genome_validate)
