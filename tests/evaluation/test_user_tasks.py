"""A user's own task: written to a temporary folder outside the project, imported through
``MODULE:CLASS`` or a real entry point, checked against the contract, pinned to its code.

Every module gets a fresh name: a module imported once stays in ``sys.modules`` for the
session, as it would in any process.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dogma_evolve.evaluation import get_task
from dogma_evolve.evaluation.evaluate import train_model
from dogma_evolve.evaluation.result import EvalRequest
from dogma_evolve.evaluation.tasks import TaskCodeError, is_builtin, pin_tasks, task_facts
from dogma_evolve.evaluation.tasks.imported import ImportedTask, RecordedTask, canonical_text, parse_spec
from dogma_evolve.genome import plugins

_names = itertools.count()

PARITY = """
import torch

class Parity:
    name = "parity"
    def __init__(self, length: int = 8, label: str = "x"):
        self.length, self.label = length, label
        self.vocab_size, self.seq_len, self.chance_accuracy = 3, length, 0.5
    def batch(self, generator, batch_size):
        x = torch.randint(2, (batch_size, self.length), generator=generator)
        y = torch.full_like(x, -100)
        y[:, -1] = x.sum(1) % 2
        return x, y
"""


def write_module(folder: Path, body: str, extra: str = "") -> str:
    """A module of a fresh name in ``folder`` holding ``body`` (+ ``extra``); its name."""
    name = f"user_task_{next(_names)}"
    (folder / f"{name}.py").write_text(textwrap.dedent(body) + textwrap.dedent(extra))
    return name


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder outside the project on sys.path, as PYTHONPATH would put it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_class_outside_the_project_is_pinned_with_its_settings_and_fingerprint(user_dir):
    name = write_module(user_dir, PARITY)
    text, records = pin_tasks(f"mqar,{name}:Parity?length=6")
    builtin, pinned = text.split(",")
    assert builtin == "mqar" and list(records) == [pinned]
    record = records[pinned]
    digest = plugins.code_fingerprint(name).digest
    assert pinned == f"{name}:Parity?length=6#{digest}"
    assert record["module"] == name and record["class"] == "Parity" and record["settings"] == {"length": 6}
    assert record["code"] == str(user_dir / f"{name}.py")
    assert (record["vocab_size"], record["seq_len"], record["chance_accuracy"]) == (3, 6, 0.5)
    assert record["train_batch_size"] == 32  # the contract's default where the class has none
    task = get_task(pinned)
    assert isinstance(task, ImportedTask) and task.name == "parity"
    inputs, targets = task.batch(task.train_generator(0), 4)
    assert inputs.shape == targets.shape == (4, 6)
    assert len(task.eval_batches(2, 3)) == 2


def test_the_pinned_text_is_read_back_to_the_same_task(user_dir):
    name = write_module(user_dir, PARITY)
    text, records = pin_tasks(f"{name}:Parity?length=5&label=%2C%26%23")
    assert records[text]["settings"] == {"length": 5, "label": ",&#"}
    assert "," not in text  # a comma would split the comma list of tasks
    again, _ = pin_tasks(text)  # pinned text in, same text out
    assert again == text


@pytest.mark.parametrize(
    "settings",
    [{"a": "3"}, {"a": 3, "b": [1, 2], "c": {"k": True}}, {"s": "two words, a comma"}, {"e": ""}],
)
def test_canonical_settings_round_trip(settings):
    text = canonical_text("m:C", settings, None)
    assert parse_spec(text).settings == settings
    assert text.count(",") == 0


def test_settings_come_from_a_yaml_or_json_file(user_dir):
    name = write_module(user_dir, PARITY)
    (user_dir / "s.yaml").write_text("length: 7\nlabel: from yaml\n")
    (user_dir / "s.json").write_text('{"length": 4}')
    text, records = pin_tasks(f"{name}:Parity@{user_dir / 's.yaml'}")
    assert records[text]["settings"] == {"length": 7, "label": "from yaml"}
    assert text.startswith(f"{name}:Parity?label=from%20yaml&length=7#")  # no file needed again
    text, records = pin_tasks(f"{name}:Parity@{user_dir / 's.json'}")
    assert records[text]["seq_len"] == 4
    (user_dir / "bad.yaml").write_text("!!python/object:os.system {}\n")
    with pytest.raises(ValueError, match="bad.yaml"):  # safe_load: no object tags
        pin_tasks(f"{name}:Parity@{user_dir / 'bad.yaml'}")


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    name = write_module(tmp_path, PARITY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    text, _ = pin_tasks(f"{name}:Parity")
    assert sys.path[-1] == str(tmp_path)  # appended: never ahead of an installed package
    assert text.startswith(f"{name}:Parity#")


BROKEN = {
    "import error": (
        "raise RuntimeError('boom at import')",
        "Parity",
        "cannot import module .*boom at import",
    ),
    "missing class": ("", "Nope", "has no attribute 'Nope'"),
    "exit at import": ("import sys\nsys.exit('bye')", "Parity", "cannot import module .*SystemExit: bye"),
    "missing attribute": (
        "class NoVocab:\n    name = 'n'\n    seq_len = 4\n    chance_accuracy = 0.5\n"
        "    def batch(self, g, b):\n        return None\n",
        "NoVocab",
        "vocab_size",
    ),
    "wrong shape": (
        "class Short(Parity):\n    def batch(self, g, b):\n        x, y = super().batch(g, b)\n"
        "        return x[:, 1:], y[:, 1:]\n",
        "Short",
        r"shape \(2, 7\).*not \(2, 8\)",
    ),
    "wrong dtype": (
        "class Floats(Parity):\n    def batch(self, g, b):\n        x, y = super().batch(g, b)\n"
        "        return x.float(), y\n",
        "Floats",
        "dtype torch.float32",
    ),
    "ids outside the vocabulary": (
        "class Big(Parity):\n    def batch(self, g, b):\n        x, y = super().batch(g, b)\n"
        "        return x + 5, y\n",
        "Big",
        "outside 0..2",
    ),
    "nothing scored": (
        "class Blind(Parity):\n    def batch(self, g, b):\n        x, y = super().batch(g, b)\n"
        "        return x, torch.full_like(y, -100)\n",
        "Blind",
        "scores no target",
    ),
    "not reproducible": (
        "class Noisy(Parity):\n    calls = 0\n    def batch(self, g, b):\n        Noisy.calls += 1\n"
        "        return super().batch(torch.Generator().manual_seed(Noisy.calls), b)\n",
        "Noisy",
        "differs between two generators",
    ),
    "batch raises": (
        "class Raises(Parity):\n    def batch(self, g, b):\n        raise KeyError('k')\n",
        "Raises",
        "raised KeyError",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_task_is_refused_in_one_line(user_dir, case):
    extra, cls, message = BROKEN[case]
    at_import = case in ("import error", "exit at import")
    name = write_module(user_dir, extra if at_import else PARITY, "" if at_import else extra)
    with pytest.raises(ValueError, match=message) as caught:
        pin_tasks(f"{name}:{cls}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nosuchmodule_zz:Task", "cannot import module 'nosuchmodule_zz'"),
        ("no_such_task_name", "unknown task 'no_such_task_name'.*MODULE:CLASS"),
        ("a b:C", "not MODULE:NAME"),
        ("m:C#123", "not a fingerprint"),
        ("m:C?novalue", "not key=value"),
        ("m:C@settings.txt", "must end in .json, .yaml or .yml"),
    ],
)
def test_malformed_or_unknown_texts_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        pin_tasks(text)


def test_bad_settings_are_refused(user_dir):
    name = write_module(user_dir, PARITY)
    with pytest.raises(ValueError, match="bad settings.*unexpected keyword argument 'size'"):
        pin_tasks(f"{name}:Parity?size=3")


def test_the_fingerprint_follows_the_code_and_a_pin_refuses_other_code(user_dir):
    name = write_module(user_dir, PARITY)
    text, _ = pin_tasks(f"{name}:Parity")
    before = plugins.code_fingerprint(name)
    (user_dir / f"{name}.py").write_text(textwrap.dedent(PARITY) + "# an edit\n")
    after = plugins.code_fingerprint(name)
    assert before.digest != after.digest and after.files == 1
    other = text.rsplit("#", 1)[0] + "#" + "0" * 16
    with pytest.raises(TaskCodeError, match="changed since the task was pinned"):
        get_task(other)


def test_a_package_is_fingerprinted_whole(user_dir):
    package = user_dir / f"user_pkg_{next(_names)}"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "tasks.py").write_text(textwrap.dedent(PARITY))
    (package / "helpers.py").write_text("X = 1\n")
    text, records = pin_tasks(f"{package.name}.sub.tasks:Parity")
    first = plugins.code_fingerprint(package.name)
    assert first.files == 4 and records[text]["code"] == str(package)
    (package / "helpers.py").write_text("X = 2\n")  # a helper the task may use
    assert plugins.code_fingerprint(package.name).digest != first.digest


def test_a_recorded_task_gives_its_values_without_its_code(user_dir):
    name = write_module(user_dir, PARITY)
    text, records = pin_tasks(f"{name}:Parity?length=9")
    (user_dir / f"{name}.py").unlink()
    del sys.modules[name]
    task = task_facts(text, records)
    assert isinstance(task, RecordedTask) and name not in sys.modules
    assert (task.vocab_size, task.seq_len, task.name) == (3, 9, "parity")
    with pytest.raises(TaskCodeError, match="only recorded"):
        task.batch(torch.Generator(), 2)


def test_a_worker_without_the_code_records_a_crash_not_an_invalid_genome(user_dir):
    name = write_module(user_dir, PARITY)
    text, _ = pin_tasks(f"{name}:Parity")
    request = EvalRequest(
        genome_yaml="", genome_id="ab", task=text.rsplit("#", 1)[0] + "#" + "f" * 16, fidelity=1
    )
    _, result = train_model(request)
    assert result.status == "crash" and "task code on" in result.reason and "fingerprint" in result.reason


def _install_distribution(site: Path, entry_points: str, package: str, body: str) -> None:
    """A distribution as pip leaves it in site-packages: the package and its dist-info
    (METADATA, entry_points.txt, top_level.txt, RECORD)."""
    (site / package).mkdir()
    (site / package / "__init__.py").write_text(textwrap.dedent(body))
    info = site / "my_tasks-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-tasks\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(entry_points)
    (info / "top_level.txt").write_text(f"{package}\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/METADATA,,\n")


def test_an_installed_entry_point_is_a_task_name_and_a_builtin_name_wins(tmp_path, monkeypatch):
    package = f"ep_tasks_{next(_names)}"
    group = "[dogma_evolve.tasks]\n"
    _install_distribution(
        tmp_path, f"{group}my_parity = {package}:Parity\nmqar = {package}:Parity\n", package, PARITY
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # importlib.metadata finds dist-info on sys.path
    text, records = pin_tasks("my_parity?length=4")
    assert text.startswith(f"{package}:Parity?length=4#")  # recorded by its import path
    assert records[text]["version"] == "my-tasks 0.3"
    assert is_builtin("mqar") and pin_tasks("mqar") == ("mqar", {})  # the built-in wins
    with pytest.raises(ValueError, match="installed \\(dogma_evolve.tasks\\): mqar, my_parity"):
        pin_tasks("my_other")
