# The suite's CPU priorities (tests/conftest.py): simulations yield to the tests that
# measure real time, also in the processes they start.

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


# Two suites' namespace tests one at a time (tests/conftest.py, pytest_runtest_protocol):
# two pytest sessions at once, each a namespace test that notes when it runs.
INNER_CONFTEST = """
import pytest
from tests.conftest import pytest_runtest_protocol  # the hook under test

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.netns)
"""
INNER_TEST = """
import time

def test_holds_the_machine(record_property):
    began = time.time()
    time.sleep(1.5)
    with open({log!r}, "a") as out:
        out.write(f"{{began}} {{time.time()}}\\n")
"""


def test_two_suites_run_their_namespace_tests_one_at_a_time(tmp_path):
    log = tmp_path / "held.txt"
    sessions = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "conftest.py").write_text(INNER_CONFTEST)
        (folder / "test_inner.py").write_text(INNER_TEST.format(log=str(log)))
        env = {
            **os.environ,
            "TESTBED_TEST_LOCK": str(tmp_path / "netns.lock"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)]
        sessions.append(subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE))
    for session in sessions:
        out, _ = session.communicate(timeout=120)
        assert session.returncode == 0, out.decode()
    held = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(held) == 2
    (_, first_ended), (second_began, _) = held
    assert first_ended <= second_began, f"overlap {first_ended - second_began:.2f} s"
