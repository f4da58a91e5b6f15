"""A user's own task: a class imported from ``MODULE:CLASS`` or an installed entry point.

**The text of a user task** (``--task``; a comma list may mix it with built-in names)::

    MODULE:CLASS                      the class (or any callable making the task) in MODULE
    MODULE:CLASS?key=value&key=value  with settings: keyword arguments of the class
    MODULE:CLASS@FILE                 settings from a JSON or YAML file (one mapping)
    NAME[?...|@FILE]                  an entry point NAME of the group ``dogma_evolve.tasks``
    ...#FINGERPRINT                   pinned: refused unless the code has this fingerprint

A built-in name (``mqar``, ``bytelm:PATH`` ...) always wins: a user task or an entry point
of the same name is reached through its ``MODULE:CLASS`` (a top-level module named
``bytelm`` cannot be: put it in a package). A value is read as JSON where it parses as
JSON (``3``, ``0.5``, ``true``, ``[1,2]``, ``"3"``), else as the text itself; ``%XX``
escapes are decoded, so a comma (which would split a comma list), ``&``, ``#`` or ``=``
inside a value is written ``%2C``, ``%26``, ``%23``, ``%3D`` (or put in a settings file).

**Pinning** (:func:`pin`): the task is imported, built and checked against the contract
(:func:`check_contract`), and its text made canonical: the import path (an entry point
resolved to the ``MODULE:CLASS`` it names), the settings sorted and escaped, and the
fingerprint of the code (``genome.plugins.code_fingerprint``), e.g.
``my_tasks:Parity?length=12#3f9c0a1b2c4d5e6f``. That text is the task's name everywhere
after: in the run's config and every evaluation row (so a cached result is reused only for
the same code, and a surrogate learns only from it), in each request a worker receives
(the worker refuses code with another fingerprint), in seeds. :func:`pin` also returns a
*record* of the task (import path, settings, fingerprint, where the code lies, its
distribution version, and the contract's values), which the run stores: a reader rebuilds
what it needs from the record as a :class:`RecordedTask`, never importing the code.

A class that does not derive from :class:`~evaluation.tasks.base.Task` (it needs only
the contract's attributes and ``batch``) is wrapped in an :class:`ImportedTask`, which
adds the streams (``train_generator``, ``eval_batches``) every task shares.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import torch

from dogma_evolve.genome import plugins

from .base import IGNORE_INDEX, Task

ENTRY_POINT_GROUP = "dogma_evolve.tasks"
_FINGERPRINT = re.compile(f"[0-9a-f]{{{plugins.FINGERPRINT_CHARS}}}")
_SAFE = "-._~:/+!*()'[]{}"  # kept as typed; what could split the text is escaped
CONTRACT = "name, vocab_size, seq_len, chance_accuracy, batch(generator, batch_size)"
_fingerprints: dict[str, plugins.CodeFingerprint] = {}  # top-level module -> at first import


class TaskCodeError(ValueError):
    """A user task's code is not what was asked for: not importable here, or another
    version (fingerprint) of it. On a worker this is the environment's fault, not the
    genome's (`evaluation.evaluate` records a crash, not ``invalid``)."""


@dataclass(frozen=True)
class TaskSpec:
    """A user task's text, parsed: ``target`` (``MODULE:CLASS`` or an entry-point name),
    ``settings`` and the pinned ``fingerprint`` (None: not pinned)."""

    target: str
    settings: dict[str, Any]
    fingerprint: str | None


def is_pinned(text: str) -> bool:
    """Whether ``text`` is a pinned user task (``MODULE:CLASS...#FINGERPRINT``), by its form
    alone: what a store holds for a user's task, and never a built-in name or a dataset."""
    body, hash_mark, pinned = text.rpartition("#")
    return (
        bool(hash_mark)
        and ":" in body
        and bool(_FINGERPRINT.fullmatch(pinned))
        and not body.startswith("bytelm:")
    )


def parse_spec(text: str) -> TaskSpec:
    """Parse a user task's text (module docstring); a settings file is read here."""
    body, hash_mark, pinned = text.rpartition("#")
    if not hash_mark:
        body, pinned = text, ""
    elif not _FINGERPRINT.fullmatch(pinned):
        raise ValueError(
            f"task {text!r}: {pinned!r} after '#' is not a fingerprint "
            f"({plugins.FINGERPRINT_CHARS} hex digits)"
        )
    cut = min((i for i in (body.find("?"), body.find("@")) if i >= 0), default=len(body))
    target, rest = body[:cut], body[cut:]
    if ":" in target:
        try:
            plugins.split_target(target)  # a malformed MODULE:CLASS is refused here
        except plugins.PluginError as error:
            raise ValueError(f"task {text!r}: {error}") from None
    elif not re.fullmatch(r"[\w.-]+", target):  # no entry point is named so
        raise ValueError(unknown_task(target))
    if rest.startswith("@"):
        settings = read_settings_file(rest[1:])
    else:
        settings = _read_query(rest[1:], text) if rest else {}
    return TaskSpec(target, settings, pinned or None)


def _read_query(query: str, text: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        key = unquote(key)
        if not eq or not key.isidentifier():
            raise ValueError(f"task {text!r}: {item!r} is not key=value")
        if key in settings:
            raise ValueError(f"task {text!r}: {key} is given twice")
        settings[key] = _read_value(unquote(value))
    return settings


def _read_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def read_settings_file(path: str) -> dict[str, Any]:
    """The settings mapping of a ``.json``, ``.yaml`` or ``.yml`` file (YAML: safe_load)."""
    file = Path(path)
    if file.suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(f"task settings file {path!r}: must end in .json, .yaml or .yml")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"task settings file {path!r}: {error.strerror or error}") from None
    try:
        if file.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as error:  # yaml.YAMLError is no ValueError: caught below
        raise ValueError(f"task settings file {path!r}: {' '.join(str(error).split())}") from None
    except Exception as error:  # noqa: BLE001 - yaml.YAMLError and its kin: one line
        raise ValueError(f"task settings file {path!r}: {' '.join(str(error).split())}") from None
    data = {} if data is None else data
    if not isinstance(data, dict) or not all(isinstance(k, str) and k.isidentifier() for k in data):
        raise ValueError(f"task settings file {path!r}: must hold one mapping of setting names to values")
    return data


def canonical_text(target: str, settings: Mapping[str, Any], fingerprint: str | None) -> str:
    """``MODULE:CLASS?k=v&...#fingerprint`` with the settings sorted and escaped so that
    :func:`parse_spec` reads back equal values; a value that is not JSON is refused."""
    parts = []
    for key in sorted(settings):
        value = settings[key]
        if isinstance(value, str) and _read_value(value) == value:  # reads back as itself
            raw = value
        else:
            try:
                raw = json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(f"task {target}: setting {key}={value!r} is not a JSON value") from None
        parts.append(f"{key}={quote(raw, safe=_SAFE)}")
    query = "?" + "&".join(parts) if parts else ""
    return f"{target}{query}" + (f"#{fingerprint}" if fingerprint else "")


def resolve_target(target: str) -> str:
    """``MODULE:CLASS`` of a target: itself, or what the entry point ``target`` names."""
    if ":" in target:
        return target
    named = plugins.entry_point(ENTRY_POINT_GROUP, target)
    if named is None:
        raise ValueError(unknown_task(target))
    return named


def unknown_task(name: str) -> str:
    """The refusal of a name that is no built-in task and no installed entry point."""
    from . import TASKS

    installed = plugins.entry_point_names(ENTRY_POINT_GROUP)
    more = f"; installed ({ENTRY_POINT_GROUP}): {', '.join(installed)}" if installed else ""
    return f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}{more}; or MODULE:CLASS for your own"


def fingerprint_of(module: str) -> plugins.CodeFingerprint:
    """The fingerprint of ``module``'s code as this process first imported it."""
    top = module.split(".")[0]
    if top not in _fingerprints:
        _fingerprints[top] = plugins.code_fingerprint(module)
    return _fingerprints[top]


def load(text: str, overrides: Mapping[str, Any] | None = None) -> tuple[Task, str, dict[str, Any]]:
    """Import and build the user task ``text``: (task, canonical text, record). Refusals are
    one-line ``ValueError`` (:class:`TaskCodeError` for the code itself)."""
    spec = parse_spec(text)
    try:
        target = resolve_target(spec.target)
        module = plugins.split_target(target)[0]
        made = plugins.import_object(target)
        code = fingerprint_of(module)
    except plugins.PluginError as error:
        raise TaskCodeError(f"task {text}: {error}") from None
    if spec.fingerprint is not None and spec.fingerprint != code.digest:
        raise TaskCodeError(
            f"task {text}: the code of {module} ({code.root}) has fingerprint {code.digest}, "
            f"not {spec.fingerprint}: it changed since the task was pinned"
        )
    settings = {**spec.settings, **(overrides or {})}
    task = build(made, settings, text)
    canonical = canonical_text(target, settings, code.digest)
    record = {
        "module": module,
        "class": target.partition(":")[2],
        "settings": settings,
        "fingerprint": code.digest,
        "code": code.root,
        "version": code.version,
        **facts(task),
    }
    return task, canonical, record


def build(made: Any, settings: dict[str, Any], text: str) -> Task:
    """``made(**settings)`` as a :class:`Task` (wrapped unless it is one)."""
    if not callable(made):
        raise ValueError(f"task {text}: {type(made).__name__} object is not a class")
    try:
        task = made(**settings)
    except TypeError as error:
        raise ValueError(f"task {text}: bad settings: {' '.join(str(error).split())}") from None
    except ValueError as error:
        raise ValueError(f"task {text}: {' '.join(str(error).split())}") from None
    if isinstance(task, Task):
        return task
    try:
        return ImportedTask(task, settings)
    except AttributeError as error:
        raise ValueError(f"task {text}: {error} (a task has {CONTRACT})") from None


def facts(task: Task) -> dict[str, Any]:
    """The contract's values of ``task`` (what a reader needs of it)."""
    return {
        "name": task.name,
        "vocab_size": task.vocab_size,
        "seq_len": task.seq_len,
        "chance_accuracy": task.chance_accuracy,
        "train_batch_size": task.train_batch_size,
    }


def check_contract(task: Task, text: str) -> None:
    """Refuse (one-line ``ValueError``) a task that breaks the contract: the values' types
    and ranges, and two draws of ``batch(generator, 2)`` from one seed: int64 tensors of
    shape (2, seq_len), ids within the vocabulary, some target scored, equal draws."""
    where = f"task {text}"
    if not isinstance(task.name, str) or not task.name:
        raise ValueError(f"{where}: name must be a non-empty string, not {task.name!r}")
    for attr, low in (("vocab_size", 2), ("seq_len", 1), ("train_batch_size", 1)):
        value = getattr(task, attr)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{where}: {attr} must be an int of at least {low}, not {value!r}")
    chance = task.chance_accuracy
    if not isinstance(chance, (int, float)) or isinstance(chance, bool) or not 0 <= chance <= 1:
        raise ValueError(f"{where}: chance_accuracy must be a number in [0, 1], not {chance!r}")
    first, again = (_draw(task, where) for _ in range(2))
    shape = (2, task.seq_len)
    for label, tensor in zip(("inputs", "targets"), first, strict=True):
        if tensor.dtype != torch.int64 or tuple(tensor.shape) != shape:
            raise ValueError(
                f"{where}: batch(generator, 2) gave {label} of shape {tuple(tensor.shape)} and dtype "
                f"{tensor.dtype}, not {shape} (batch_size, seq_len) int64"
            )
    inputs, targets = first
    scored = targets != IGNORE_INDEX
    if not bool(scored.any()):
        raise ValueError(f"{where}: batch(generator, 2) scores no target (all are {IGNORE_INDEX})")
    for label, ids in (("inputs", inputs), ("targets", targets[scored])):
        if int(ids.min()) < 0 or int(ids.max()) >= task.vocab_size:
            raise ValueError(f"{where}: {label} hold ids outside 0..{task.vocab_size - 1} (vocab_size)")
    if not all(torch.equal(a, b) for a, b in zip(first, again, strict=True)):
        raise ValueError(f"{where}: batch(generator, 2) differs between two generators of one seed")


def _draw(task: Task, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        out = task.batch(torch.Generator().manual_seed(0), 2)
    except Exception as error:  # noqa: BLE001 - the user's code: one line, whatever it raised
        raise ValueError(f"{where}: batch(generator, 2) raised {type(error).__name__}: {error}") from None
    if not (
        isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)
    ):
        raise ValueError(f"{where}: batch(generator, 2) must return (inputs, targets) tensors")
    return out[0], out[1]


def import_recorded(texts: Iterable[str], why: str) -> dict[str, dict[str, Any]]:
    """Import each pinned user task among ``texts`` (a store's task texts; built-in names and
    datasets are skipped) with the code it was pinned to: {text: record}. Code that cannot be
    imported, or whose fingerprint is not the pinned one, is a one-line
    :class:`TaskCodeError` naming ``why`` (what needs it: "resuming run R"). Every command and
    library call that runs a stored user task (a resume, an export, a replay) comes here."""
    records: dict[str, dict[str, Any]] = {}
    for text in dict.fromkeys(t.strip() for t in texts):
        if not is_pinned(text):
            continue
        try:
            records[text] = load(text)[2]
        except ValueError as error:
            raise TaskCodeError(f"{error}; {why} needs the code the run was made with") from None
    return records


def pin(text: str) -> tuple[str, dict[str, Any]]:
    """The canonical text of the user task ``text`` and its record (module docstring),
    after importing it and checking the contract."""
    task, canonical, record = load(text)
    check_contract(task, text)
    return canonical, record


class ImportedTask(Task):
    """A user's task object that does not derive from ``Task``: its contract values and
    ``batch`` (and ``eval_batches`` when it has one), with the streams of ``Task``."""

    def __init__(self, inner: Any, settings: Mapping[str, Any]) -> None:
        self.inner, self._settings = inner, dict(settings)
        self.name = inner.name
        self.vocab_size = inner.vocab_size
        self.seq_len = inner.seq_len
        self.chance_accuracy = inner.chance_accuracy
        object.__setattr__(
            self, "train_batch_size", getattr(inner, "train_batch_size", Task.train_batch_size)
        )

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = self.inner.batch(generator, batch_size)
        return inputs, targets

    def eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        own = getattr(self.inner, "eval_batches", None)
        if own is not None:
            return list(own(num_batches, batch_size, seed))
        return super().eval_batches(num_batches, batch_size, seed)

    def settings(self) -> dict[str, object]:
        return dict(self._settings)


class RecordedTask(Task):
    """A user task as a run recorded it (:func:`pin`'s record): its contract values, for
    a command that reads a store; its code is not imported, so it draws no batch."""

    def __init__(self, text: str, record: Mapping[str, Any]) -> None:
        self.text, self.record = text, dict(record)
        self.name = str(record["name"])
        self.vocab_size = int(record["vocab_size"])
        self.seq_len = int(record["seq_len"])
        self.chance_accuracy = float(record["chance_accuracy"])
        object.__setattr__(self, "train_batch_size", int(record["train_batch_size"]))

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise TaskCodeError(
            f"task {self.text} is only recorded here; its code ({self.record['module']}) was not imported"
        )

    def settings(self) -> dict[str, object]:
        return dict(self.record.get("settings") or {})


__all__ = [
    "CONTRACT",
    "ENTRY_POINT_GROUP",
    "ImportedTask",
    "RecordedTask",
    "TaskCodeError",
    "TaskSpec",
    "canonical_text",
    "check_contract",
    "facts",
    "import_recorded",
    "is_pinned",
    "load",
    "parse_spec",
    "pin",
    "read_settings_file",
]
