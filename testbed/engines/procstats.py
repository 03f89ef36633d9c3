# What a process uses, from /proc: CPU time, resident and private memory (the
# emulator's figures for peers and delay engines, here or on a machine's agent);
# and the scheduling weight of our own session (session_nice).

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CLOCK_TICKS", "cpu_seconds", "private_memory_kb", "resident_kb", "session_nice"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
AUTOGROUP = Path("/proc/self/autogroup")


def session_nice(value: int) -> int | None:
    """Set the nice value of our session's scheduling group (Linux autogroups: every
    session competes for the CPU as one group, whatever its processes' own nice
    values); returns the one it had, or None where there are no autogroups or we
    may not (below 0 needs CAP_SYS_NICE)."""
    try:
        before = int(AUTOGROUP.read_text().split("nice")[1])
        AUTOGROUP.write_text(f"{value}\n")
    except (OSError, IndexError, ValueError):
        return None
    return before


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
