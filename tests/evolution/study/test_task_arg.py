"""`create_search(task=...)` with a task class or object: the text Ray workers rebuild it
from, the script rule (`__main__`), and a library resume refused when the code changed.

Modules get fresh names (a module imported once stays in `sys.modules` for the session);
what needs a process of its own (a script as `__main__`, code edited after this process
fingerprinted it) runs in a subprocess.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dogma_evolve.evolution import create_search
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.study.task_arg import task_text

_names = itertools.count()
PARITY = """
import dataclasses
import torch

@dataclasses.dataclass
class Parity:
    length: int = 8
    name = "parity"
    vocab_size = 3
    chance_accuracy = 0.5

    @property
    def seq_len(self):
        return self.length

    def batch(self, generator, batch_size):
        x = torch.randint(2, (batch_size, self.length), generator=generator)
        y = torch.full_like(x, -100)
        y[:, -1] = x.sum(1) % 2
        return x, y

class Shifted(Parity):
    def __init__(self, length=8):
        super().__init__(length)
        self.offset = 1  # not a setting: the rebuilt object would not have it

    def batch(self, generator, batch_size):
        x, y = super().batch(generator, batch_size)
        return (x + self.offset) % 3, y

class Settled:
    name, vocab_size, chance_accuracy = "settled", 3, 0.5

    def __init__(self, length=4):
        self.seq_len = length

    def settings(self):
        return {"length": self.seq_len}

    def batch(self, generator, batch_size):
        x = torch.randint(2, (batch_size, self.seq_len), generator=generator)
        return x, x.clone()
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    """A fresh module holding PARITY in a folder on sys.path: (its name, the folder)."""
    name = f"study_task_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PARITY))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, tmp_path


def test_a_class_and_an_object_become_the_text_workers_rebuild_them_from(module) -> None:
    name, _ = module
    imported = __import__(name)
    assert task_text(imported.Parity) == f"{name}:Parity"
    assert task_text(imported.Parity(length=5)) == f"{name}:Parity?length=5"
    assert task_text(imported.Settled(length=6)) == f"{name}:Settled?length=6"
    assert task_text("mqar") == "mqar"
    assert task_text(imported.Shifted()) == f"{name}:Shifted?length=8"
    changed = imported.Shifted()
    changed.offset = 2  # state its settings do not carry: the workers would build another task
    with pytest.raises(UsageError, match=r"Shifted is not what .*:Shifted\?length=8 builds"):
        task_text(changed)


def test_a_search_on_a_task_object_pins_its_class_settings_and_code(module, tmp_path: Path) -> None:
    name, _ = module
    task = __import__(name).Parity(length=6)
    search = create_search(f"sqlite:///{tmp_path / 's.db'}", task=task, population=2, steps=5)
    text = search.run.task
    assert text.startswith(f"{name}:Parity?length=6#")
    record = search.config.task_code[text]
    assert (record["module"], record["class"], record["settings"]) == (name, "Parity", {"length": 6})
    assert record["seq_len"] == 6 and record["code"] == str(tmp_path / f"{name}.py")


def test_a_script_that_searches_when_imported_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(PARITY)
        + "\nfrom dogma_evolve import create_search\n"
        + "create_search('sqlite:///s.db', task=Parity, population=2, steps=5)\n"
    )
    proc = subprocess.run(
        [sys.executable, script.name], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert "unguarded.py starts a search when it is imported" in proc.stderr
    assert "if __name__ == '__main__':" in proc.stderr
    assert not (tmp_path / "s.db").exists()


def test_a_class_of_an_interactive_session_is_refused_in_one_line(tmp_path: Path) -> None:
    code = textwrap.dedent(PARITY) + "\nfrom dogma_evolve import create_search\n"
    code += "create_search('sqlite:///s.db', task=Parity)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1 and "defined in an interactive session" in proc.stderr
    assert not (tmp_path / "s.db").exists()


def test_a_library_resume_refuses_task_code_that_changed_as_the_command_does(module, tmp_path: Path) -> None:
    name, folder = module
    url = f"sqlite:///{tmp_path / 's.db'}"
    search = create_search(url, task=__import__(name).Parity, population=2, steps=5)
    source = folder / f"{name}.py"
    source.write_text(source.read_text() + "\n# edited after the search was made\n")
    resume = f"from dogma_evolve import load_search\nload_search({url!r}).optimize()"
    proc = subprocess.run(
        [sys.executable, "-c", resume], cwd=folder, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert "it changed since the task was pinned" in proc.stderr
    assert f"resuming run {search.run_id} needs the code the run was made with" in proc.stderr
    assert search.run.last_generation == -1 and search.run.driver is None  # untouched
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("evolve")), "run", "--resume", search.run_id, "--store", url],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 2 and "it changed since the task was pinned" in cli.stderr
