# Loading the project's compiled helpers (built by `make native` with Debian's gcc):
# the delay engine's data path (fastpath.c) and the prober's loop (pinger.c). Each
# has a Python fallback; this says why a library is not used, so the fallback is
# never silent.

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["load_library"]


def load_library(library: Path, source: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """The shared library, or None and why not (not built, older than its source,
    not loadable)."""
    if not library.exists():
        return None, f"{library.name} is not built (run `make install`)"
    if source.exists() and source.stat().st_mtime > library.stat().st_mtime:
        return None, f"{library.name} is older than {source.name} (run `make install`)"
    try:
        return ctypes.CDLL(str(library)), None
    except OSError as exc:
        return None, f"cannot load {library.name}: {exc}"
