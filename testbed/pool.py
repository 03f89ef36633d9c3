# Worker processes (predictions, campaign runs) and signals.

from __future__ import annotations

import signal

__all__ = ["worker_signals"]


def worker_signals() -> None:
    """A pool initializer: workers leave interruptions to the parent. Ctrl-C
    (sent to the whole process group) is ignored, SIGTERM kills outright.
    Forked workers would otherwise inherit the CLI's SIGTERM-raises-
    KeyboardInterrupt handler and die mid-task in a way the pool's shutdown
    then waits on for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
