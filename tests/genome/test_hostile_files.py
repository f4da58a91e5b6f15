"""`evolve genome validate` refuses hostile files cleanly: exit 2, one line, nothing run, and
without expanding them (its peak memory stays small: an alias bomb fully expanded would hold
9^9 references, gigabytes; no test here measures wall-clock time)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from dogma_evolve.evolution.cli.main import main

BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}" + f", *{chr(97 + i)}" * 8 + "]" for i in range(8)]
    + ["regions: *i"]
)

HOSTILE: dict[str, bytes] = {
    "binary junk": os.urandom(4096),
    "nul bytes": b"regions:\x00\x00\x00",
    "python tag": b"!!python/object/apply:os.system ['touch /tmp/evolve-pwned']\n",
    "python tag nested": b"regions:\n  - !!python/name:os.system\n",
    "custom tag": b"regions: !custom [1]\n",
    "alias bomb": BILLION_LAUGHS.encode(),
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep mapping": b"a: " * 5000 + b"1",
    "absurd width": b"regions:\n- {id: s0, type: structural, settings: {d_model: 1000000000000}}\n",
    "huge float": b"regions:\n- {id: s0, type: structural, settings: {rope_theta: 1e400}}\n",
    "int past float range": b"regions:\n- {id: s0, type: structural, settings: {rope_theta: 1"
    + b"0" * 400
    + b"}}\n",
    "nan": b"regions:\n- {id: s0, type: structural, settings: {rope_theta: .nan}}\n",
    "enormous int": b"regions:\n- {id: s0, type: structural, settings: {d_model: " + b"9" * 5000 + b"}}\n",
    "empty file": b"",
    "scalar document": b"42\n",
    "list document": b"- a\n- b\n",
    "invalid yaml": b"regions: [unclosed\n",
    "oversized": b"# " + b"x" * (3 << 20) + b"\n",
    "invalid utf8": b"regions: \xff\xfe\n",
    "many documents": b"---\na: 1\n---\nb: 2\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_validate_refuses_hostile_file(name, tmp_path, capsys):
    path = tmp_path / "genome.yaml"
    path.write_bytes(HOSTILE[name])
    main(["genome", "validate", "preset:gpt2-small"])  # imports made: they are not the file's
    capsys.readouterr()
    tracemalloc.start()
    try:
        code = main(["genome", "validate", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("evolve: error:") and "\n" not in err
    assert "Traceback" not in err
    assert peak < 256 << 20, f"{name} peaked at {peak / 2**20:.0f} MiB"
    assert not Path("/tmp/evolve-pwned").exists()


def test_validate_in_a_fresh_process_prints_no_traceback(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_bytes(HOSTILE["alias bomb"])
    proc = subprocess.run(
        [sys.executable, "-m", "dogma_evolve.evolution.cli.main", "genome", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "alias" in proc.stderr


def test_validate_accepts_a_preset_and_a_written_file(tmp_path, capsys):
    from dogma_evolve.genome import preset

    path = tmp_path / "llama.yaml"
    path.write_text(preset("llama3-8b").to_yaml())
    assert main(["genome", "validate", str(path)]) == 0
    assert preset("llama3-8b").id in capsys.readouterr().out


def test_missing_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["genome", "validate", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
