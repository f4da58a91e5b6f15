"""The README's Python example, run as written: its ```python block that calls
`create_search` is saved under the name its first line gives, in an empty folder, and run
with this interpreter (as `python FILE` after `make setup`): a user's task class defined in
the script itself, a short DOGMA search on real Ray workers, a callback per generation, the
best individual, the table of evaluations and an export.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dogma_evolve.evolution import load_search

README = Path(__file__).resolve().parents[1] / "README.md"


def python_example() -> tuple[str, str]:
    """(file name, source) of the README's ```python block that makes a search."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (source,) = [b for b in blocks if "create_search(" in b]
    name = re.match(r"# (\w+\.py)\b", source)
    assert name, "the example's first line names its file: # NAME.py ..."
    return name.group(1), source


def test_the_example_is_one_block_that_names_its_file() -> None:
    name, source = python_example()
    assert name == "first_token.py" and 'if __name__ == "__main__":' in source


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written_in_an_empty_folder(tmp_path: Path) -> None:
    name, source = python_example()
    (tmp_path / name).write_text(source, encoding="utf-8")
    proc = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["generation 0", "generation 1", "generation 2"]
    assert "quality" in lines[3] and "parameters" in lines[3] and lines[4].endswith("evaluations")
    assert (tmp_path / "best-model" / "model.pt2").is_file()
    assert (tmp_path / "best-model" / "dogma_model").is_dir()
    search = load_search(f"sqlite:///{tmp_path / 'first_token.db'}")
    assert search.run.last_generation == 2 and search.run.task.startswith("first_token:FirstToken#")
    assert int(lines[4].split()[0]) == len(search.evaluations())
    assert search.best_individual.sequence in lines[3]
