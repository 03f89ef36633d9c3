# Reading and writing job traces in the Standard Workload Format (SWF v2.2).
#
# A trace is `;` header lines (`; Key: value`) and one job per line of 18
# whitespace-separated numbers: 1 job id, 2 submit (s from the trace's start),
# 3 wait, 4 run time, 5 allocated processors, 6 average CPU time, 7 used
# memory, 8 requested processors, 9 requested time, 10 requested memory,
# 11 status, 12 user, 13 group, 14 executable, 15 queue, 16 partition,
# 17 preceding job, 18 think time; -1 means unknown in every field. A line
# that is not that is an error naming the file, line and field; unknown
# values are kept (filters decide what a use can do without).

from __future__ import annotations

import gzip
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import msgspec

from testbed.errors import InputError

__all__ = ["FIELDS", "Job", "Workload", "parse_swf", "read_swf", "write_swf"]

FIELDS = (
    "job",
    "submit_s",
    "wait_s",
    "run_s",
    "procs",
    "cpu_s",
    "memory_kb",
    "req_procs",
    "req_time_s",
    "req_memory_kb",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding",
    "think_s",
)
_FLOAT_FIELDS = {"cpu_s", "memory_kb", "req_memory_kb"}  # may carry decimals in the archive


class Job(msgspec.Struct, frozen=True):
    """One SWF record (times in seconds; -1: unknown)."""

    job: int
    submit_s: float
    wait_s: float = -1
    run_s: float = -1
    procs: int = -1
    cpu_s: float = -1
    memory_kb: float = -1
    req_procs: int = -1
    req_time_s: float = -1
    req_memory_kb: float = -1
    status: int = -1
    user: int = -1
    group: int = -1
    executable: int = -1
    queue: int = -1
    partition: int = -1
    preceding: int = -1
    think_s: float = -1

    @property
    def size(self) -> int:
        """Processors the job needs: allocated, else requested (-1: unknown)."""
        return self.procs if self.procs >= 1 else self.req_procs

    @property
    def runtime_s(self) -> float:
        """Run time, else the requested time (-1: unknown)."""
        return self.run_s if self.run_s >= 0 else self.req_time_s

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in FIELDS)


class Workload(msgspec.Struct):
    jobs: list[Job]
    header: list[str] = msgspec.field(default_factory=list)  # the `;` lines, as they were
    source: str = "<workload>"
    notes: list[str] = msgspec.field(default_factory=list)  # what was done to it

    def __len__(self) -> int:
        return len(self.jobs)

    def header_value(self, key: str) -> str | None:
        """A header field such as MaxProcs (None when absent)."""
        for line in self.header:
            name, sep, value = line.lstrip(";").partition(":")
            if sep and name.strip().lower() == key.lower():
                return value.split("#", 1)[0].strip()
        return None

    def with_jobs(self, jobs: Sequence[Job], note: str) -> Workload:
        return Workload(list(jobs), self.header, self.source, [*self.notes, note])


def _open(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="strict") as handle:
            yield from handle
    except FileNotFoundError:
        raise InputError("no such workload file", source=str(path)) from None
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise InputError(f"not a readable SWF text file ({exc})", source=str(path)) from None


def parse_swf(lines: Iterable[str], source: str = "<swf>") -> Workload:
    header: list[str] = []
    jobs: list[Job] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            header.append(line)
            continue
        fields = line.split()
        if len(fields) != len(FIELDS):
            raise InputError(
                f"a job line has 18 fields, this one {len(fields)}", source=source, line=number
            )
        values: dict[str, float | int] = {}
        for k, (name, text) in enumerate(zip(FIELDS, fields, strict=True), start=1):
            try:
                value = float(text)
            except ValueError:
                raise InputError(
                    f"field {k} ({name}): expected a number, not {text!r}",
                    source=source,
                    line=number,
                    column=k,
                ) from None
            if not math.isfinite(value) or (value < 0 and value != -1):
                raise InputError(
                    f"field {k} ({name}): expected a number >= 0 or -1 (unknown), not {text}",
                    source=source,
                    line=number,
                    column=k,
                )
            if name not in _FLOAT_FIELDS and not name.endswith("_s"):
                if value != int(value):
                    raise InputError(
                        f"field {k} ({name}): expected a whole number, not {text}",
                        source=source,
                        line=number,
                        column=k,
                    )
                value = int(value)
            values[name] = value
        if values["submit_s"] < 0:
            raise InputError(
                "field 2 (submit_s): the submit time is required",
                source=source,
                line=number,
                column=2,
            )
        jobs.append(Job(**values))  # type: ignore[arg-type]
    return Workload(jobs, header, source)


def read_swf(path: str | Path) -> Workload:
    """Read an SWF trace (plain or .gz); raises InputError at the first bad line."""
    path = Path(path)
    return parse_swf(_open(path), str(path))


def write_swf(workload: Workload, path: str | Path) -> None:
    """Write an SWF trace: the original header, what was done to it, then the jobs."""
    with Path(path).open("w", encoding="utf-8") as out:
        for line in workload.header:
            out.write(line + "\n")
        for note in workload.notes:
            out.write(f";  Testbed: {note}\n")
        for job in workload.jobs:
            out.write(" ".join(_number(v) for v in job.values()) + "\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"
