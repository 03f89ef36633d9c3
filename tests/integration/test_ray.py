# Runs as Ray tasks (testbed/pool.py, docs/beyond-one-machine.md): a campaign and a
# prediction spec on a Ray cluster of this machine give what they give without
# Ray, byte for byte where the simulator is deterministic; errors raised in a
# task come back as themselves; a machine with other code is refused.

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import ray
from click.testing import CliRunner

from testbed.cli import cli
from testbed.errors import InputError
from testbed.experiments.campaign import run_campaign
from testbed.experiments.predict import run_prediction
from testbed.pool import RayError, _call_checked, project_fingerprint, run_tasks
from testbed.runs import new_run_dir
from testbed.spec import load_any_spec, load_spec

from ..conftest import tree_metric
from .test_churn_run import SMALL, write


@pytest.fixture(scope="module")
def cluster():
    """One Ray cluster of this machine for the module (starting one takes seconds)."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def folder_files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def untimed(jsonl: bytes) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in ("t", "wall_s")}
        for line in jsonl.splitlines()
    ]


def test_a_campaign_on_ray_gives_the_runs_and_folders_of_a_local_one(tmp_path, cluster):
    a = write(tmp_path, "a.churn", "from 0s to 10s join 50%\nat 30s crash 1\nat 50s stop")
    b = write(tmp_path, "b.churn", "from 0s to 10s join 50%\nat 30s leave 2\nat 50s stop")
    overrides = [f'campaign.scripts=["{a}", "{b}"]', "campaign.seeds=[1, 2]", "churn.settle_s=15"]
    spec, _ = load_spec(None, overrides, defaults=SMALL)
    here, local = run_campaign(spec, out=tmp_path / "local", jobs=1)
    there, remote = run_campaign(spec, out=tmp_path / "ray", jobs=2, ray="local")

    def rows(result):
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in result["rows"]]

    assert remote["status"] == "complete" and remote["runs"] == 4
    assert rows(remote) == rows(local)
    assert remote["repair_s"] == local["repair_s"] and remote["repair_s"]["crashes"] == 2
    for run in ("a-s1", "a-s2", "b-s1", "b-s2"):
        mine, theirs = folder_files(here / run), folder_files(there / run)
        assert sorted(theirs) == sorted(mine)
        for name in ("events.jsonl", "schedule.jsonl"):
            assert theirs[name] == mine[name], (run, name)  # same seed, same log
        for name in ("applied.jsonl", "checks.jsonl"):  # the same, but for the wall clock's t
            assert untimed(theirs[name]) == untimed(mine[name]), (run, name)
        summary = json.loads(theirs["summary.json"])
        assert summary["invariants"] == json.loads(mine["summary.json"])["invariants"]
    assert json.loads((there / "campaign.json").read_text())["runs"] == 4
    assert (there / "campaign.png").stat().st_size > 10_000


def test_a_prediction_spec_runs_its_seeds_on_ray(tmp_path, cluster):
    matrix = tmp_path / "tree.txt"
    np.savetxt(matrix, tree_metric(30, seed=3), fmt="%.17g")
    text = f'kind = "predict"\nseeds = [4, 7, 9]\n[topology]\nref = "{matrix}"\n'
    text += '[[techniques]]\nkind = "gnp"\n[[techniques]]\nkind = "vivaldi"\nrounds = 2000\n'
    (tmp_path / "p.toml").write_text(text)
    spec, data = load_any_spec(tmp_path / "p.toml", ["workers=1"])
    _, local = run_prediction(spec, data, out=tmp_path / "local")
    spec, data = load_any_spec(tmp_path / "p.toml", ["workers=2", 'cluster="local"'])
    run, remote = run_prediction(spec, data, out=tmp_path / "ray")

    def figures(summary):
        return {
            name: [{k: v for k, v in s.items() if k != "cpu_s"} for s in result["per_seed"]]
            for name, result in summary["prediction"].items()
        }

    assert remote["status"] == "complete" and remote["workers"] == 2
    assert figures(remote) == figures(local)
    assert [s["seed"] for s in remote["prediction"]["gnp"]["per_seed"]] == [4, 7, 9]
    assert len((run / "runs.jsonl").read_text().splitlines()) == 6


def test_an_error_raised_in_a_task_comes_back_as_itself(tmp_path, cluster):
    calls = [("good-name", str(tmp_path / "a")), ("not a name!", str(tmp_path / "b"))]
    with pytest.raises(InputError, match="run name 'not a name!' must be 1-64 letters"):
        list(run_tasks(new_run_dir, calls, jobs=2, ray="local"))


def test_a_task_refuses_a_machine_with_other_code():
    here = os.getcwd()  # (a task works in the driver's folder: this one, so nothing moves)
    assert _call_checked(str.upper, ("x",), here, project_fingerprint()) == "X"
    with pytest.raises(RayError, match="runs another version of the project"):
        _call_checked(str.upper, ("x",), here, "0123456789abcdef")
    assert os.getcwd() == here


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["campaign", "S", "--ray", "nowhere"], "'nowhere' is not a Ray cluster"),
        (["campaign", "S", "--ray", "h:99999"], "'h:99999' is not a Ray cluster"),
    ],
)
def test_bad_cluster_addresses_are_refused_before_anything_runs(tmp_path, args, message):
    result = CliRunner().invoke(cli, [a.replace("S", str(tmp_path / "s.toml")) for a in args])
    assert result.exit_code == 2 and message in result.output


def test_ray_runs_only_what_has_tasks(tmp_path):
    spec = write(tmp_path, "s.toml", 'name = "x"\nengine = "sim"\n')
    result = CliRunner().invoke(cli, ["run", spec, "--ray"])
    assert result.exit_code != 0
    assert "--ray runs the seeds of a 'predict' spec" in result.output


def test_a_scheduling_spec_schedules_its_clusterings_on_ray(tmp_path, cluster):
    from testbed.experiments.sched import run_sched

    from ..testbed.test_sched import SMALL as SCHED

    spec, data = load_any_spec(None, [], defaults=SCHED)
    _, local = run_sched(spec, data, out=tmp_path / "local")
    spec, data = load_any_spec(None, ["workers=2", 'cluster="local"'], defaults=SCHED)
    run_dir, remote = run_sched(spec, data, out=tmp_path / "ray")
    assert list(remote["slowdown"]) == list(local["slowdown"])  # the spec's order
    for key in ("slowdown", "by_variant", "traffic", "wait_s", "utilisation", "jobs"):
        assert remote[key] == local[key], key
    for path in (tmp_path / "local").glob("placements-*.jsonl"):
        assert untimed((run_dir / path.name).read_bytes()) == untimed(path.read_bytes())


def test_a_table_runs_its_seeds_on_ray(tmp_path, cluster):
    matrix = tmp_path / "tree.txt"
    np.savetxt(matrix, tree_metric(40, seed=3), fmt="%.17g")
    args = ["table", "5.2", "--seeds", "2", "--set", f'topology.ref="{matrix}"',
            "--set", "techniques.2.rounds=2000"]  # fmt: skip
    local = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "local")])
    remote = CliRunner().invoke(cli, [*args, "--ray", "--out", str(tmp_path / "ray")])
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    here, there = (
        json.loads((tmp_path / d / "summary.json").read_text()) for d in ("local", "ray")
    )
    for name, result in here["prediction"].items():
        strip = [{k: v for k, v in s.items() if k != "cpu_s"} for s in result["per_seed"]]
        assert strip == [
            {k: v for k, v in s.items() if k != "cpu_s"}
            for s in there["prediction"][name]["per_seed"]
        ]


def _die_once(marker: str) -> str:
    """A task whose worker dies the first time (the machine lost, say), then succeeds."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died once")
        os._exit(1)
    return "ok"


def test_a_run_lost_with_its_worker_is_run_again(tmp_path, cluster):
    marker = tmp_path / "marker"
    assert list(run_tasks(_die_once, [(str(marker),)], ray="local")) == [(0, "ok")]
    assert marker.read_text() == "died once"
    with pytest.raises(RayError, match="lost with its worker 1 times"):
        list(run_tasks(_die_once, [(str(tmp_path / "again"),)], ray="local", retries=0))
