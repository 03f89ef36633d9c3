# The suite's CPU priorities (tests/conftest.py): simulations yield to the tests that
# measure real time, also in the processes they start.

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import SIMULATION_NICE


def _child_nice() -> int:
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def test_a_simulation_test_and_what_it_starts_run_at_the_lower_priority():
    assert os.getpriority(os.PRIO_PROCESS, 0) == SIMULATION_NICE
    assert _child_nice() == SIMULATION_NICE


@pytest.mark.netns
def test_a_namespace_test_runs_at_the_normal_priority():
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0
    assert _child_nice() == 0
