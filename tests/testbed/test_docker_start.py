# Starting the Docker daemon when it is not running (testbed/net/_containers.py): the
# daemon outlives the process that started it, which must neither keep it as a child nor
# leave a Popen object behind (collected, it warned "still running": under -W error a
# container test failed whenever dockerd had to be started).

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from testbed.net import _containers


def _pids_running(path: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_a_started_daemon_is_not_our_child_and_leaves_nothing_to_warn(tmp_path, monkeypatch):
    daemon = tmp_path / "dockerd"
    daemon.write_text("#!/bin/sh\nsleep 60\n")
    daemon.chmod(0o755)
    answers = iter([1, 1, 0])  # not running; still starting; up
    monkeypatch.setattr(_containers, "_docker", lambda: "docker")
    monkeypatch.setattr(
        _containers,
        "_run",
        lambda argv, timeout_s=60.0: subprocess.CompletedProcess(argv, next(answers), "", ""),
    )
    monkeypatch.setattr(shutil, "which", lambda name: str(daemon) if name == "dockerd" else None)
    monkeypatch.setattr(_containers, "DOCKERD_LOG", tmp_path / "dockerd.log")
    try:
        assert _containers.ensure_docker() == "docker"
        gc.collect()  # a Popen left behind would warn here (an error under -W error)
        deadline = time.monotonic() + 5
        while not (pids := _pids_running(daemon)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids) == 1, pids
        assert _parent(pids[0]) != os.getpid()
        assert os.getsid(pids[0]) != os.getsid(0)
    finally:
        for pid in _pids_running(daemon):
            subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)  # its sleep
            os.kill(pid, 9)


def test_without_dockerd_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(_containers, "_docker", lambda: "docker")
    monkeypatch.setattr(
        _containers, "_run", lambda argv, timeout_s=60.0: subprocess.CompletedProcess(argv, 1)
    )
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(_containers.EmulationError, match="make install"):
        _containers.ensure_docker()
