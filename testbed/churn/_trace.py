# Trace-driven churn: availability traces in Splay's on/off format.
#
# One line per node, in the order of the run's hosts: the times (seconds from
# the start) at which it goes up and down, alternately, beginning with up;
# an odd count leaves it up at the end. A blank line is a node that never
# comes up; `#` starts a comment. Times on a line must increase. The trace
# becomes a schedule of joins and leaves (or crashes: `down` says which), so
# it runs through the same executor as a script.

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from testbed.churn._compile import Event, Schedule, Universe, compile_churn
from testbed.churn._parse import read_churn, read_text
from testbed.errors import InputError

__all__ = ["read_trace", "schedule_for", "trace_schedule"]


def trace_schedule(
    text: str, names: Sequence[str], *, down: str = "leave", source: str = "<trace>"
) -> Schedule:
    """Turn an on/off availability trace into a schedule on `names` (line k -> host k)."""
    if down not in ("leave", "crash"):
        raise InputError(f"down must be leave or crash, not {down!r}", source=source)
    events: list[Event] = []
    node = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0]
        if not body.strip() and raw.lstrip().startswith("#"):
            continue  # a comment line is not a node
        if node >= len(names):
            if body.strip():
                raise InputError(
                    f"the trace has more nodes than the run's {len(names)} hosts",
                    source=source,
                    line=number,
                )
            continue
        last = -math.inf
        column = 1
        for k, field in enumerate(body.split()):
            column = body.index(field, column - 1) + 1
            try:
                t = float(field)
            except ValueError:
                raise InputError(
                    f"expected a time in seconds, not {field!r}",
                    source=source,
                    line=number,
                    column=column,
                ) from None
            if not (math.isfinite(t) and 0 <= t <= 366 * 86400):
                raise InputError(
                    f"expected a time from 0 s to a year, not {field}",
                    source=source,
                    line=number,
                    column=column,
                )
            if t <= last:
                raise InputError(
                    f"times must increase along a line: {field} after {last:g}",
                    source=source,
                    line=number,
                    column=column,
                )
            last = t
            verb = "join" if k % 2 == 0 else down
            events.append(Event(t=t, verb=verb, hosts=(names[node],), line=number))
            column += len(field)
        node += 1
    events.sort(key=lambda e: e.t)
    return Schedule(events, max((e.t for e in events), default=0.0), source, tuple(names))


def read_trace(path: str | Path, names: Sequence[str], *, down: str = "leave") -> Schedule:
    text = read_text(path, "availability trace")
    return trace_schedule(text, names, down=down, source=str(path))


def schedule_for(
    script: str | None, trace: str | None, trace_down: str, universe: Universe, seed: int
) -> Schedule:
    """A spec's [churn] (a script, or a trace) as a schedule on `universe`'s hosts."""
    if trace is not None:
        return read_trace(trace, universe.names, down=trace_down)
    if script is None:
        raise InputError(
            "churn: no script or trace; a spec with [campaign] runs with `testbed campaign`",
            source="<spec>",
        )
    return compile_churn(read_churn(script), universe, seed, source=script)
