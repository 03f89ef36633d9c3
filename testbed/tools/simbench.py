# `testbed bench sim`: the simulator's speed, this checkout against another commit, side by
# side in one invocation (issue "Paper scale in minutes", item 5).
#
# Theory of operation
#   Each side runs the same spec (path relative to the repository, read from that side's own
#   tree, with the same --set overrides) through its own `python -m testbed.cli run`, one
#   after the other on the same machine: the other commit from a temporary git worktree (its
#   own code and spec, PYTHONPATH pointing at it), this one from the checkout. Each side's
#   summary.json gives its wall time, events handled (where that commit reports them),
#   datagrams and virtual time; the ratio is old wall time over new. Both sides must run the
#   same virtual time, or the comparison says so (`same_virtual_time`). With `repeat` > 1 the
#   sides alternate (old, new, old, new, ...) and each side's median run is compared: the
#   machines are shared, and one run of a side may vary by a fifth.
#
# Rules
#   1. The worktree is removed however the benchmark ends.
#   2. A side that fails is an error naming the side, with the end of its stderr.

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testbed.errors import InputError, TestbedError

__all__ = ["DEFAULT_SPEC", "commit_worktree", "compare_sim_speed", "repository_root"]

DEFAULT_SPEC = "scripts/experiments/sim-speed.toml"
SIDE_TIMEOUT_S = 3 * 3600  # a side that runs longer than this is stuck


def repository_root() -> Path:
    """The git checkout this testbed runs from."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        raise InputError(
            "bench sim compares commits, so it needs the testbed's git checkout; "
            f"{root} is not one",
            source="<bench sim>",
        )
    return root


def resolve_commit(against: str, what: str) -> str:
    """The full hash of commit `against` of this checkout; InputError names `what`."""
    root = repository_root()
    rev = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", f"{against}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if rev.returncode != 0:
        raise InputError(f"--against {against!r}: not a commit of {root}", source=what)
    return rev.stdout.strip()


@contextlib.contextmanager
def commit_worktree(commit: str) -> Iterator[Path]:
    """A temporary git worktree of `commit`, removed however the block ends."""
    root = repository_root()
    with tempfile.TemporaryDirectory(prefix="bench-against-") as scratch:
        tree = Path(scratch) / "old"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit],
            check=True,
            capture_output=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )


def _side(label: str, tree: Path, spec: str, overrides: list[str], out: Path) -> dict[str, Any]:
    """Run `spec` with the code of `tree`; the figures of its summary."""
    argv = [sys.executable, "-m", "testbed.cli", "run", spec, "--out", str(out)]
    for item in overrides:
        argv += ["--set", item]
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        argv, cwd=tree, env=env, capture_output=True, text=True, timeout=SIDE_TIMEOUT_S
    )
    if done.returncode != 0:
        raise TestbedError(f"bench sim: the {label} side failed: {done.stderr.strip()[-1500:]}")
    summary = json.loads((out / "summary.json").read_text())
    sim = summary.get("sim", {})
    return {
        "wall_s": summary["wall_s"],
        "events_per_s": sim.get("events_per_s"),
        "events": sim.get("events"),  # None: that commit does not report it
        "datagrams": sim.get("datagrams"),
        "virtual_s": sim.get("virtual_s"),
        "members_final": summary.get("members_final"),
        "violations": summary.get("invariants", {}).get("violations"),
        "run_dir": str(out),
    }


def compare_sim_speed(
    against: str,
    *,
    spec: str = DEFAULT_SPEC,
    overrides: list[str] | None = None,
    out: Path,
    repeat: int = 1,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run `spec` on commit `against` (old) and on this checkout (new), `repeat` times each,
    alternating; returns {spec, against, repeat, old, new, old_walls_s, new_walls_s, ratio,
    same_virtual_time}, where old and new are each side's run of median wall time and the
    ratio is theirs. Run folders go under `out` (old, new; or old.K, new.K)."""
    root = repository_root()
    overrides = list(overrides or [])
    if Path(spec).is_absolute():
        raise InputError(
            "give the spec relative to the repository: each side reads its own", source=spec
        )
    commit = resolve_commit(against, "<bench sim>")
    if repeat < 1:
        raise InputError(f"--repeat {repeat}: expected at least 1", source="<bench sim>")
    olds: list[dict[str, Any]] = []
    news: list[dict[str, Any]] = []
    with commit_worktree(commit) as tree:
        if not (tree / spec).exists():
            raise InputError(f"{against} has no {spec}", source=spec)
        # The sides alternate, so that a slow spell of a shared machine hits both.
        for k in range(repeat):
            suffix = "" if repeat == 1 else f".{k + 1}"
            say(f"old side{suffix}: {spec} at {commit[:10]}")
            olds.append(_side("old", tree, spec, overrides, out / f"old{suffix}"))
            say(f"new side{suffix}: {spec} in {root}")
            news.append(_side("new", root, spec, overrides, out / f"new{suffix}"))
    old, new = _median_run(olds), _median_run(news)
    return {
        "spec": spec,
        "overrides": overrides,
        "against": commit,
        "repeat": repeat,
        "old": old,
        "new": new,
        "old_walls_s": [run["wall_s"] for run in olds],
        "new_walls_s": [run["wall_s"] for run in news],
        "ratio": round(old["wall_s"] / new["wall_s"], 3) if new["wall_s"] else None,
        "same_virtual_time": all(
            run["virtual_s"] == olds[0]["virtual_s"] for run in (*olds, *news)
        ),
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time (the lower middle one of an even number)."""
    ordered = sorted(runs, key=lambda run: run["wall_s"])
    return ordered[(len(ordered) - 1) // 2]
