"""The fair-share benchmark: its table's arithmetic, and one real arm beside a busy loop that
finishes and stores what the quiet run stored."""

from __future__ import annotations

import pytest

from benchmarks.fair_share import Arm, main, table


def test_the_table_states_each_arm_against_the_quiet_run_and_its_fair_share() -> None:
    arms = [Arm(0, 0, 50.0, True, None), Arm(4, 0, 160.0, True, True), Arm(4, 15, 900.0, False, None)]
    rows = table(arms, cores=2, workers=2).splitlines()[2:]
    assert rows[0] == "| 0 | 0 | 50 s | 1.0 | 1.0 | yes | reference |"
    assert rows[1] == "| 4 | 0 | 160 s | 3.2 | 3.0 | yes | true |"  # (4 + 2) / 2 cores
    assert rows[2] == "| 4 | 15 | > 900 s (stopped) | 18.0 | 3.0 | no | none |"


@pytest.mark.slow
def test_a_run_beside_a_busy_loop_finishes_with_the_quiet_runs_results(capsys) -> None:
    argv = ["--busy", "1", "--niceness", "0", "--population", "2", "--generations", "0"]
    assert main([*argv, "--steps", "5", "--workers", "1", "--limit", "600"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| 0 | 0 |") and out[2].endswith("| yes | reference |")
    assert out[3].startswith("| 1 | 0 |") and out[3].endswith("| yes | true |")
