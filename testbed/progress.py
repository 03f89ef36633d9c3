# Progress display for long operations (rich, on stderr), behind the small
# interface open_wan() and the benchmarks use: start(n), advance(kind),
# phase(name), stop(). Nothing is shown when stderr is not a terminal, so
# logs and JSON output stay clean.

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["BringupProgress", "console", "err_console", "progress_bar"]

console = Console()
err_console = Console(stderr=True)


class BringupProgress:
    """rich progress bars for bringing a network up."""

    STEPS = ("namespaces", "links", "hosts")

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = err_console.is_terminal if enabled is None else enabled
        self._progress: Progress | None = None
        self._tasks: dict[str, int] = {}
        self._phase: int | None = None

    def start(self, n_hosts: int) -> None:
        if not self.enabled:
            return
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=False,
        )
        self._progress.start()
        totals = {"namespaces": n_hosts + 1, "links": n_hosts, "hosts": n_hosts}
        for step in self.STEPS:
            self._tasks[step] = self._progress.add_task(step, total=totals[step])

    def advance(self, kind: str) -> None:
        if self._progress is not None and kind in self._tasks:
            self._progress.advance(self._tasks[kind])

    def phase(self, name: str) -> None:
        if self._progress is None:
            return
        if self._phase is not None:
            self._progress.update(self._phase, completed=1)
        self._phase = self._progress.add_task(name, total=1)

    def stop(self) -> None:
        if self._progress is not None:
            if self._phase is not None:
                self._progress.update(self._phase, completed=1)
            self._progress.stop()
            self._progress = None

    def __bool__(self) -> bool:
        return self.enabled


@contextlib.contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A single bar; yields update(done). Silent when stderr is not a terminal."""
    if not err_console.is_terminal:
        yield lambda done: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)
