"""A user's own task on the command line: the commands that train name the code they import.

Commands that only read a store (`runs`, `report`, `audit`, `blame` ...) show a user task's
pinned text (`evaluation.tasks.imported`) and never import its code: what they need of the
task comes from the run's record (`RunConfig.task_code`). Commands that train or run it
(`run`, `run --resume`, `scale`, `calibrate`, `ablate`, `replay`, `export`) import it in
this process first, one line on stderr naming the module and where its code lies, and
refuse (exit 2, one line) code that cannot be imported or whose fingerprint is not the
recorded one, before any run is created or changed.

A user's block kinds (`phenotype.plugins`, ``--plugin``) are treated alike: readers show a
stored genome's kind by its recorded stand-in (`RunConfig.plugin_code`), and the commands
that build models import the plugin first (:func:`import_stored_plugins`), refusing other
code in one line. The commands that build genomes from a file or a preset (`scale`,
`calibrate`, `genome show`, `genome validate`) take ``--plugin`` as `run` does
(:func:`add_plugin_option`, :func:`load_plugin_option`): imported first, named on stderr,
a failure one line and exit 2 before anything is created.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dogma_evolve.evolution.cli.options import comma_list
from dogma_evolve.evolution.cli.output import err
from dogma_evolve.evolution.errors import UsageError

#: appended to a genome's "unknown kind" refusal when no ``--plugin`` was given
PLUGIN_HINT = "a user's block kind? load its module with --plugin MODULE (docs/plugins.md)"


def say_imported(records: Mapping[str, Mapping[str, Any]]) -> None:
    """One stderr line per user task imported: its pinned text, module and code."""
    for text, record in records.items():
        version = f", {record['version']}" if record.get("version") else ""
        err().print(f"evolve: task {text}: imported module {record['module']} from {record['code']}{version}")


def pin_task_option(text: str) -> str:
    """``--task`` of a command that trains outside `RunConfig` (`scale`): each user task
    imported, checked and pinned (canonical text), and named on stderr."""
    from dogma_evolve.evaluation.tasks import pin_tasks  # torch

    try:
        pinned, records = pin_tasks(text)
    except ValueError as e:
        raise UsageError(str(e)) from None
    say_imported(records)
    return pinned


def import_stored_tasks(texts: Iterable[str], why: str) -> None:
    """Import each user task among ``texts`` (pinned texts from a store) for a command that
    trains on them (`evaluation.tasks.imported.import_recorded`, the library's rule); a
    missing module or changed code is a ``UsageError`` naming ``why``."""
    from dogma_evolve.evaluation.tasks.imported import import_recorded  # torch

    try:
        records = import_recorded(texts, why)
    except ValueError as e:
        raise UsageError(str(e)) from None
    say_imported(records)


def import_stored_plugins(config: Mapping[str, Any], why: str) -> None:
    """Import the plugins a stored run's config (a dict) names, each pinned to the code the
    run was made with; a missing module or changed code is a ``UsageError`` naming ``why``."""
    texts = config.get("plugins") or []
    if not texts:
        return
    from dogma_evolve.phenotype.plugins import load  # torch

    for text in texts:
        try:
            record = load(text)
        except ValueError as e:
            raise UsageError(f"{e}; {why} needs the code the run was made with") from None
        err().print(f"evolve: plugin {text}: imported module {record['module']} from {record['code']}")


def say_plugins(records: Mapping[str, Mapping[str, Any]]) -> None:
    """One stderr line per plugin a new run imported: its pinned text, module and kinds."""
    for text, record in records.items():
        kinds = ", ".join(record["kinds"])
        err().print(
            f"evolve: plugin {text}: imported module {record['module']} from {record['code']} ({kinds})"
        )


def add_plugin_option(parser: Any) -> None:
    """``--plugin MODULE[,MODULE]``, as `evolve run` takes it (a comma list)."""
    parser.add_argument(
        "--plugin",
        dest="plugins",
        type=comma_list,
        default=(),
        metavar="MODULE[,MODULE]",
        help="a user's block kinds: modules (or installed dogma_evolve.kinds entry points) that "
        "register gene kinds and blocks, comma list, imported first (docs/plugins.md)",
    )


def load_plugin_option(texts: Iterable[str], contract: bool) -> dict[str, dict[str, Any]]:
    """Import the plugins of ``--plugin`` (`phenotype.plugins`): their records by pinned
    text, each named on stderr; a failure is a ``UsageError``. A command that trains
    (``contract``) holds their kinds to the block contract as `evolve run` does
    (`phenotype.plugins.pin`); one that only reads or accounts a genome does not."""
    texts = tuple(t.strip() for t in texts if t.strip())
    if not texts:
        return {}
    from dogma_evolve.phenotype.plugins import load, pin  # torch

    try:
        if contract:
            records = pin(texts, {})[1]
        else:
            records = {r["pinned"]: r for r in map(load, texts)}
    except ValueError as e:
        raise UsageError(str(e)) from None
    say_plugins(records)
    return records


def genome_refusal(source: str, error: Exception, plugins: Iterable[str]) -> UsageError:
    """The one line of a genome ``source`` that does not load: with an unknown kind and no
    ``--plugin`` given, it names ``--plugin`` as the fix."""
    line = f"{source}: {error}"
    if "unknown kind" in str(error) and not any(p.strip() for p in plugins):
        line += f"; {PLUGIN_HINT}"
    return UsageError(line)


__all__ = [
    "PLUGIN_HINT",
    "add_plugin_option",
    "genome_refusal",
    "import_stored_plugins",
    "import_stored_tasks",
    "load_plugin_option",
    "pin_task_option",
    "say_imported",
    "say_plugins",
]
