# The shape every kind of run shares: its folder, its logs, its summary, its checks, its
# teardown, and how it tells its caller how it goes.
#
# Theory of operation
#   A runner opens a Run (`with Run(spec.name, data, out) as run:`): the folder is made
#   (runs/<name>-<timestamp>/ or --out) and spec.toml written before anything starts, so a
#   run that fails later still says what it was asked. Logs opened with `run.log(file)` are
#   JSON lines flushed per record and closed when the run ends, however it ends.
#   `run.finish(summary)` writes summary.json and returns the RunResult; a runner that is
#   interrupted calls it from its `finally` with status "interrupted", so the folder stays
#   usable. Teardown of what a run brought up (an engine, a network) is the runner's own
#   `finally`; `run.teardown(close)` runs one such step and keeps its error for later, so a
#   teardown problem never hides the error already on its way out.
#
#   Every runner has one signature, `run_<kind>(spec, data, *, out=None, report=None)` ->
#   RunResult, and is found from the spec's type in RUNNERS (testbed/experiments/__init__.py).
#   Report carries the optional callbacks a caller (the CLI) gives: a status line, each
#   check of an overlay run, each finished prediction job, emulated ping progress.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

import tomli_w

from testbed.runs import JsonLog, new_run_dir, strip_none, write_json

__all__ = ["Report", "Run", "RunResult"]


def _ignore(*_args: Any) -> None:
    return None


@dataclass(frozen=True)
class Report:
    """How a run tells its caller how it goes; every callback is optional.

    say(line): a status line now and then (what the run is doing).
    phase(label, result): an overlay run's invariant check, as written to checks.jsonl.
    result(record): a prediction job (one technique on one seed) finished.
    ping(done, total): emulated all-pairs pings, hosts done of all hosts.
    """

    say: Callable[[str], None] = _ignore
    phase: Callable[[str, dict[str, Any]], None] = _ignore
    result: Callable[[dict[str, Any]], None] = _ignore
    ping: Callable[[int, int], None] = _ignore


class RunResult(NamedTuple):
    """A finished (or interrupted) run: its folder and what summary.json says (a pair, so
    `run_dir, summary = run_sched(...)` reads as it always did)."""

    dir: Path
    summary: dict[str, Any]


class Run:
    """One run's folder; a context manager that closes the run's logs however it ends."""

    def __init__(self, name: str, data: dict[str, Any], out: str | Path | None) -> None:
        """Make the folder and write spec.toml (the spec as run, after --set).

        Raises:
            InputError: a bad name, or an --out folder that is not empty (nothing made).
        """
        self.dir = new_run_dir(name, out)
        (self.dir / "spec.toml").write_text(tomli_w.dumps(strip_none(data)))
        self._logs: list[JsonLog] = []
        self._teardown_error: BaseException | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for log in self._logs:
            log.close()

    def log(self, filename: str) -> JsonLog:
        """A JSON-lines log in the folder, closed when the run ends."""
        log = JsonLog(self.dir / filename)
        self._logs.append(log)
        return log

    def write_json(self, filename: str, data: Any) -> Path:
        """Write a JSON file of the run (atomically) and return its path."""
        path = self.dir / filename
        write_json(path, data)
        return path

    def teardown(self, step: Callable[[], object]) -> None:
        """Run a teardown step; an error is kept for `raise_teardown_error`, not raised, so a
        run's own error on its way out is never hidden by its teardown's."""
        try:
            step()
        except Exception as exc:  # kept, and re-raised once the summary is written
            if self._teardown_error is None:
                self._teardown_error = exc

    @property
    def teardown_error(self) -> BaseException | None:
        return self._teardown_error

    def finish(self, summary: dict[str, Any]) -> RunResult:
        """Write summary.json; with a teardown error, the summary says so."""
        if self._teardown_error is not None:
            summary["teardown_error"] = str(self._teardown_error)
        self.write_json("summary.json", summary)
        return RunResult(self.dir, summary)

    def raise_teardown_error(self) -> None:
        """Raise the teardown step's error, if there was one (after a complete run)."""
        if self._teardown_error is not None:
            raise self._teardown_error
