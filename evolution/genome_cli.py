"""`evolve genome show|validate`: a genome's sequence view, its accounting, its validity."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console

from evolution.errors import UsageError
from genome import Genome, GenomeError, load_genome


def _out() -> Console:
    # No markup: sequence views are full of brackets that rich would read as tags.
    return Console(highlight=False, soft_wrap=True, markup=False)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _load(source: str) -> Genome:
    try:
        return load_genome(source)
    except GenomeError as e:
        raise UsageError(f"{source}: {e}") from None


def cmd_genome_show(args: argparse.Namespace) -> int:
    from phenotype import account

    genome = _load(args.source)
    acct = account(genome, args.seq_len)
    if args.json:
        _emit_json({"genome_id": genome.id, "sequence": genome.sequence_view(), **acct.to_dict()})
        return 0
    out = _out()
    if args.format == "yaml":
        sys.stdout.write(genome.to_yaml())
        return 0
    out.print(f"genome    {genome.id}")
    out.print(f"sequence  {genome.sequence_view()}")
    for key, value in acct.to_dict().items():
        out.print(f"{key:<22}{value:,}")
    return 0


def cmd_genome_validate(args: argparse.Namespace) -> int:
    genome = _load(args.source)
    if args.json:
        _emit_json({"valid": True, "genome_id": genome.id})
    else:
        _out().print(f"valid: {genome.id}")
    return 0


def add_genome_command(sub: Any, common: argparse.ArgumentParser) -> None:
    genome = sub.add_parser("genome", help="show or validate a genome")
    gsub = genome.add_subparsers(dest="genome_command", required=True)
    show = gsub.add_parser("show", parents=[common], help="sequence view and accounting")
    show.add_argument("source", help="FILE or preset:NAME")
    show.add_argument("--format", choices=("text", "yaml"), default="text")
    show.add_argument("--seq-len", type=int, default=2048, help="context for FLOPs (2048)")
    show.set_defaults(func=cmd_genome_show)
    validate = gsub.add_parser("validate", parents=[common], help="exit 0 if valid, 2 if not")
    validate.add_argument("source", help="FILE or preset:NAME")
    validate.set_defaults(func=cmd_genome_validate)
