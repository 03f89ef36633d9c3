# `testbed bench sim`: two commits side by side, each with its own code and spec.

from __future__ import annotations

import subprocess

import pytest

from testbed.errors import InputError
from testbed.tools.simbench import compare_sim_speed, repository_root

TINY = ["topology.hosts=60", "phases.0.count=12", "phases.0.over_s=6", "phases.0.settle_s=10"]


def _worktrees() -> str:
    root = repository_root()
    return subprocess.run(
        ["git", "-C", str(root), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_commit_against_itself_runs_the_same_simulation(tmp_path):
    before = _worktrees()
    result = compare_sim_speed("HEAD", overrides=TINY, out=tmp_path)
    old, new = result["old"], result["new"]
    # The same spec on (at least) the same peer code: the same virtual time and traffic.
    assert result["same_virtual_time"] and old["virtual_s"] == new["virtual_s"] > 0
    assert old["datagrams"] == new["datagrams"] > 0
    assert old["members_final"] == new["members_final"] == 12
    assert new["events"] > 0 and result["ratio"] == pytest.approx(
        old["wall_s"] / new["wall_s"], rel=1e-2
    )
    assert (tmp_path / "old" / "summary.json").exists() and (
        tmp_path / "new" / "summary.json"
    ).exists()
    assert _worktrees() == before  # the temporary worktree is gone


def test_an_unknown_commit_is_named(tmp_path):
    with pytest.raises(InputError, match=r"--against 'no-such-rev': not a commit"):
        compare_sim_speed("no-such-rev", overrides=TINY, out=tmp_path)


def test_a_spec_must_be_given_inside_the_repository(tmp_path):
    with pytest.raises(InputError, match="relative to the repository"):
        compare_sim_speed("HEAD", spec=str(tmp_path / "x.toml"), out=tmp_path)


def test_repeated_sides_alternate_and_compare_their_medians(tmp_path):
    result = compare_sim_speed("HEAD", overrides=TINY, out=tmp_path, repeat=3)
    assert result["repeat"] == 3
    assert len(result["old_walls_s"]) == len(result["new_walls_s"]) == 3
    for side in ("old", "new"):
        walls = sorted(result[f"{side}_walls_s"])
        assert result[side]["wall_s"] == walls[1]  # the median run
        assert all((tmp_path / f"{side}.{k}" / "summary.json").exists() for k in (1, 2, 3))
    assert result["ratio"] == pytest.approx(
        result["old"]["wall_s"] / result["new"]["wall_s"], rel=1e-2
    )
    assert result["same_virtual_time"]


def test_repeat_must_be_positive(tmp_path):
    with pytest.raises(InputError, match="--repeat 0"):
        compare_sim_speed("HEAD", overrides=TINY, out=tmp_path, repeat=0)
