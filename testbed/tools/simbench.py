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
#   same virtual time, or the comparison says so (`same_virtual_time`).
#
# Rules
#   1. The worktree is removed however the benchmark ends.
#   2. A side that fails is an error naming the side, with the end of its stderr.

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.errors import InputError, TestbedError

__all__ = ["DEFAULT_SPEC", "compare_sim_speed", "repository_root"]

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
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run `spec` on commit `against` (old) and on this checkout (new); returns
    {spec, against, old, new, ratio, same_virtual_time}. Run folders go under `out`."""
    root = repository_root()
    overrides = list(overrides or [])
    if Path(spec).is_absolute():
        raise InputError(
            "give the spec relative to the repository: each side reads its own", source=spec
        )
    rev = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", f"{against}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if rev.returncode != 0:
        raise InputError(f"--against {against!r}: not a commit of {root}", source="<bench sim>")
    commit = rev.stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as scratch:
        tree = Path(scratch) / "old"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit],
            check=True,
            capture_output=True,
        )
        try:
            if not (tree / spec).exists():
                raise InputError(f"{against} has no {spec}", source=spec)
            say(f"old side: {spec} at {commit[:10]}")
            old = _side("old", tree, spec, overrides, out / "old")
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
    say(f"new side: {spec} in {root}")
    new = _side("new", root, spec, overrides, out / "new")
    return {
        "spec": spec,
        "overrides": overrides,
        "against": commit,
        "old": old,
        "new": new,
        "ratio": round(old["wall_s"] / new["wall_s"], 3) if new["wall_s"] else None,
        "same_virtual_time": old["virtual_s"] == new["virtual_s"],
    }
