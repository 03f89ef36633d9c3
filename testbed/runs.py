# Run folders: runs/<name>-<YYYYmmdd-HHMMSS>/ holding everything a run used
# and produced. Files are written as the run goes (JSON lines, flushed per
# line), so an interrupted run still leaves a usable folder.

from __future__ import annotations

import io
import json
import re
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from testbed.errors import InputError

__all__ = [
    "JsonLog",
    "new_run_dir",
    "changed_files",
    "pack_folder",
    "read_appended",
    "strip_none",
    "unpack_folder",
    "write_files",
    "write_json",
]

DEFAULT_RUNS_DIR = Path("runs")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def new_run_dir(name: str, out: str | Path | None = None) -> Path:
    """Create and return a fresh run folder.

    Args:
        name: short run name (letters, digits, '.', '_', '-').
        out: the exact folder to use (created; must be empty if it exists), or
            None for runs/<name>-<timestamp>/ under the current directory.
    """
    if not _NAME_RE.match(name):
        raise InputError(
            f"run name {name!r} must be 1-64 letters, digits, '.', '_' or '-'", source="<run name>"
        )
    if out is not None:
        path = Path(out)
        if path.exists() and any(path.iterdir()):
            raise InputError(
                "the output folder exists and is not empty; choose another --out", source=str(path)
            )
        path.mkdir(parents=True, exist_ok=True)
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = DEFAULT_RUNS_DIR / f"{name}-{stamp}"
    path, k = base, 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            k += 1
            path = base.with_name(f"{base.name}-{k}")


def strip_none(value: Any) -> Any:
    """`value` without the None fields of its tables (TOML has no null)."""
    if isinstance(value, dict):
        return {k: strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_none(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


class JsonLog:
    """An append-only JSON-lines log, one flushed line per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stream = path.open("a", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()  # threads write whole lines (a WAN's process reaper)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"t": round(time.time(), 6), "kind": kind, **fields}, default=str)
        with self._lock:
            if not self._stream.closed:
                self._stream.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._stream.close()


def pack_folder(folder: Path) -> bytes:
    """A run folder as a gzipped tar (for a run made on another machine)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buffer.getvalue()


def unpack_folder(packed: bytes, folder: Path) -> None:
    """Unpack what pack_folder made into `folder` (created); nothing may land outside it."""
    folder.mkdir(parents=True, exist_ok=True)
    root = folder.resolve()
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        members = tar.getmembers()
        for member in members:  # tarfile's filters need Python 3.11.4; Debian 12 has 3.11.2
            target = (root / member.name).resolve()
            if not (member.isfile() or member.isdir()) or not target.is_relative_to(root):
                raise ValueError(f"a packed run folder holds {member.name!r}: not a plain file")
        tar.extractall(root, members=members)


# -- files mirrored from another machine as they grow ---------------------------------------------

Stats = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns)


def read_appended(
    folder: Path, pattern: str, offsets: dict[str, int], *, whole_lines: bool = True
) -> dict[str, bytes]:
    """What each file of `folder` matching `pattern` (a glob) holds past
    offsets[its path relative to folder]; with whole_lines, up to its last newline
    (a log line still being written comes next time)."""
    out = {}
    for path in sorted(folder.glob(pattern)) if folder.is_dir() else []:
        if not path.is_file():
            continue
        name = path.relative_to(folder).as_posix()
        with path.open("rb") as stream:
            stream.seek(offsets.get(name, 0))
            data = stream.read()
        if whole_lines:
            data = data[: data.rfind(b"\n") + 1]
        if data:
            out[name] = data
    return out


def changed_files(folder: Path, known: Stats) -> tuple[dict[str, bytes], Stats]:
    """The files under `folder` whose size or modification time is not what `known`
    says (their contents), and every file's (size, mtime_ns)."""
    changed, stats = {}, {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if not path.is_file() or path.is_symlink():
            continue
        name = path.relative_to(folder).as_posix()
        info = path.stat()
        stats[name] = (info.st_size, info.st_mtime_ns)
        if known.get(name) != stats[name]:
            changed[name] = path.read_bytes()
    return changed, stats


def write_files(folder: Path, files: dict[str, bytes]) -> Stats:
    """Write `files` (relative path -> contents) under `folder`; nothing may land
    outside it. Returns each written file's (size, mtime_ns)."""
    root = folder.resolve()
    stats = {}
    for name, data in files.items():
        target = (root / name).resolve()
        if not target.is_relative_to(root) or target == root:
            raise ValueError(f"{name!r} is not a file under {folder}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        info = target.stat()
        stats[name] = (info.st_size, info.st_mtime_ns)
    return stats
