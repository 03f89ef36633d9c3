# The suite's CPU priorities (tests/conftest.py): simulations yield to the tests that
# measure real time, also in the processes they start.

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest

from ..conftest import SIMULATION_NICE, machine_turn


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


# Two suites' namespace tests one at a time, first come, first served (tests/conftest.py,
# pytest_runtest_protocol): two pytest sessions at once, each with four namespace tests
# (tests/.../netns/) that note when they run.
INNER_CONFTEST = """
from tests.conftest import pytest_runtest_protocol  # the hook under test
"""
INNER_TEST = """
import time
import pytest

@pytest.mark.parametrize("k", range(4))
def test_holds_the_machine(k):
    began = time.time()
    time.sleep(0.6)
    with open({log!r}, "a") as out:
        out.write(f"{{began}} {{time.time()}} {name}\\n")
"""


def test_two_suites_take_turns_at_their_namespace_tests(tmp_path):
    log = tmp_path / "held.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTBED_"))}
    env["TESTBED_TEST_QUEUE"] = str(tmp_path / "queue")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    sessions = []
    for name in ("a", "b"):
        tests = tmp_path / name / "netns"
        tests.mkdir(parents=True)
        (tmp_path / name / "conftest.py").write_text(INNER_CONFTEST)
        (tests / "test_inner.py").write_text(INNER_TEST.format(log=str(log), name=name))
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        sessions.append(
            subprocess.Popen([*argv, str(tests)], cwd=tmp_path / name, env=env, stdout=PIPE)
        )
    for session in sessions:
        out, _ = session.communicate(timeout=120)
        assert session.returncode == 0, out.decode()
    held = sorted(
        (float(a), float(b), who) for a, b, who in map(str.split, log.read_text().splitlines())
    )
    assert len(held) == 8
    for (_, ended, _), (began, _, _) in itertools.pairwise(held):
        assert ended <= began, f"overlap {ended - began:.2f} s: {held}"
    # Each waits for the other's queued test: no suite takes three turns in a row.
    order = "".join(who for _, _, who in held)
    assert "aaa" not in order and "bbb" not in order, order


def test_a_place_held_by_a_process_that_is_gone_is_dropped(tmp_path):
    queue = tmp_path / "queue"
    queue.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=PIPE)
    stale = queue / f"{1:012d}-{int(gone.stdout)}"
    stale.write_text("12345")  # its start time: not the one of whatever has that pid now
    with machine_turn(queue) as waited:
        assert waited < 1.0
        assert not stale.exists()
        assert [p.name for p in queue.glob("*-*")] == [f"{2:012d}-{os.getpid()}"]
    assert list(queue.glob("*-*")) == []
