# Which testbed runs exist on this machine, so that `testbed clean` can tell a
# live run from what a killed one left behind.
#
# One JSON file per run in /run/testbed (a tmpfs: it goes at reboot, like the
# namespaces it describes). The file is written before the first namespace is
# created and removed after the last one is gone.

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["REGISTRY_DIR", "RunRecord", "list_runs"]

REGISTRY_DIR = Path(os.environ.get("TESTBED_REGISTRY", "/run/testbed"))


def _start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class RunRecord:
    run_id: str
    owner_pid: int
    owner_start: int | None
    run_dir: str
    netns: list[str]
    started: float = field(default_factory=time.time)
    pids: list[int] = field(default_factory=list)

    @classmethod
    def for_this_process(cls, run_id: str, run_dir: Path, netns: list[str]) -> RunRecord:
        return cls(run_id, os.getpid(), _start_time(os.getpid()), str(run_dir), netns)

    @property
    def path(self) -> Path:
        return REGISTRY_DIR / f"{self.run_id}.json"

    @property
    def control_path(self) -> Path:
        """Where this run's delay engine listens for control requests."""
        return REGISTRY_DIR / f"{self.run_id}.sock"

    @property
    def sockets_dir(self) -> Path:
        """Where this run's peers put their control sockets (removed with the record)."""
        return REGISTRY_DIR / f"{self.run_id}.d"

    def owner_alive(self) -> bool:
        """True if the process that made this run still runs (pid reuse is ruled out)."""
        return self.owner_start is not None and _start_time(self.owner_pid) == self.owner_start

    def save(self) -> None:
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(self.path)

    def add_pid(self, pid: int) -> None:
        self.pids.append(pid)
        self.save()

    def remove(self) -> None:
        shutil.rmtree(self.sockets_dir, ignore_errors=True)
        for path in (self.control_path, self.path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def list_runs() -> list[RunRecord]:
    """Every run recorded on this machine (unreadable files are skipped)."""
    runs = []
    try:
        files = sorted(REGISTRY_DIR.glob("*.json"))
    except OSError:
        return []
    for path in files:
        try:
            runs.append(RunRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return runs
