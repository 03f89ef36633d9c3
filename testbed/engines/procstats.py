# What a process uses, from /proc: CPU time, resident and private memory (the
# emulator's figures for peers and delay engines, here or on a machine's agent).

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CLOCK_TICKS", "cpu_seconds", "private_memory_kb", "resident_kb"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def resident_kb(pid: int) -> int | None:
    """Resident memory of a process (VmRSS)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def private_memory_kb(pid: int) -> int | None:
    """Private (unshared) memory of a process: what another copy of it would add."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines()[1:] if ":" in line)
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty") if k in fields)
