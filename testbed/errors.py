# The testbed's exception hierarchy.
#
# Strategy (after h11/_util.py): every error a user can cause by what they wrote
# (a matrix file, a spec, a CLI flag, a control command) is a TestbedError
# subclass whose message names the place (file:line, field, host) and says what
# was expected. Callers branch on the type and the structured fields, never on
# the message text. Internal bugs stay ordinary Python exceptions.

from __future__ import annotations

__all__ = [
    "CleanupError",
    "ControlError",
    "EmulationError",
    "FloorError",
    "InputError",
    "TestbedError",
    "TopologyError",
]


class TestbedError(Exception):
    """Base class of every error the testbed raises on purpose."""

    __test__ = False  # not a pytest test class, whatever its name says


class InputError(TestbedError):
    """Something a user wrote is malformed.

    Attributes:
        source: the file (or "<flag --hosts>", "<control>") the input came from.
        line: 1-based line number, or None when not line-oriented.
        column: 1-based column (or field number), or None.
        reason: what is wrong and what was expected.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        self.reason = reason
        where = ""
        if source is not None:
            where = str(source)
            if line is not None:
                where += f":{line}"
                if column is not None:
                    where += f":{column}"
            where += ": "
        super().__init__(where + reason)


class TopologyError(InputError):
    """A latency matrix, host selection or topology spec is invalid."""


class FloorError(TopologyError):
    """Configured latencies are below what the delay engine can deliver.

    Attributes:
        pairs: the offending ordered pairs as (src_name, dst_name, rtt_ms).
        floor_rtt_ms: the engine's measured floor.
    """

    def __init__(self, pairs: list[tuple[str, str, float]], floor_rtt_ms: float) -> None:
        self.pairs = pairs
        self.floor_rtt_ms = floor_rtt_ms
        shown = ", ".join(f"{a}-{b} ({rtt:.3f} ms)" for a, b, rtt in pairs[:8])
        more = f" and {len(pairs) - 8} more" if len(pairs) > 8 else ""
        super().__init__(
            f"{len(pairs)} pair(s) have an RTT below the delay engine's measured floor of "
            f"{floor_rtt_ms:.3f} ms: {shown}{more}. Scale the matrix up (scale=...), choose "
            "other hosts, or pass clamp=True (--clamp) to raise them to the floor.",
            source="<topology>",
        )


class EmulationError(TestbedError):
    """The emulated network could not be brought up or operated."""


class ControlError(TestbedError):
    """A runtime control command was rejected; nothing was changed.

    Attributes:
        op: the control operation ("set_pair", "partition", ...).
        field: the argument that was wrong, if one was.
    """

    def __init__(self, op: str, reason: str, *, field: str | None = None) -> None:
        self.op = op
        self.field = field
        self.reason = reason
        where = f"{op}: " if field is None else f"{op}: {field}: "
        super().__init__(where + reason)


class CleanupError(TestbedError):
    """Teardown could not remove everything; the message lists what is left."""
