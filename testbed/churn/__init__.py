"""The churn/fault language: parser, compiler to a schedule, availability traces
(docs/churn.md)."""

from testbed.churn._compile import Event, Schedule, Universe, compile_churn
from testbed.churn._execute import ChurnEngine, Executor, Quiet
from testbed.churn._parse import Statement, parse_churn, read_churn
from testbed.churn._trace import read_trace, schedule_for, trace_schedule

__all__ = [
    "ChurnEngine",
    "Executor",
    "Quiet",
    "Event",
    "Schedule",
    "Statement",
    "Universe",
    "compile_churn",
    "parse_churn",
    "read_churn",
    "read_trace",
    "schedule_for",
    "trace_schedule",
]
