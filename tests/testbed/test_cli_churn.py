# The churn, campaign and workload commands, as a user runs them.

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from testbed.cli import cli

ROOT = Path(__file__).parents[2]


def test_churn_prints_the_schedule_of_a_bundled_script(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = "scripts/experiments/campaign-sim.toml"
    result = CliRunner().invoke(
        cli, ["churn", "traces/churn/faults.churn", "--spec", spec, "--json"]
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    assert [e["verb"] for e in events].count("join") == 1000  # 80 % of 1,250 hosts
    assert {"partition", "heal", "latency", "frame", "freeze", "thaw", "stop"} <= {
        e["verb"] for e in events
    }


def test_churn_names_the_line_of_a_bad_script(tmp_path):
    bad = tmp_path / "bad.churn"
    bad.write_text("at 0s join 4\nat 5s crash h99\n")
    result = CliRunner().invoke(cli, ["churn", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2:7:" in result.output and "no host is named 'h99'" in result.output


def test_campaign_refuses_a_spec_without_a_campaign(tmp_path):
    spec = tmp_path / "plain.toml"
    spec.write_text('name = "plain"\n')
    result = CliRunner().invoke(cli, ["campaign", str(spec)])
    assert result.exit_code == 2 and "no [campaign] table" in result.output


def test_workload_slices_and_saves(tmp_path):
    out = tmp_path / "intense.swf"
    trace = str(ROOT / "traces" / "pwa" / "DAS2-fs1-2003-1.swf.gz")
    args = ["workload", trace, "--min-size", "2", "--slice", "1000", "--window", "643"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["jobs"] == 1000 and figures["span_s"] == 643 and figures["size_max"] == 20
    assert out.read_text().count("\n") > 1000


def test_run_prints_the_run_folder_as_its_last_line(tmp_path: Path) -> None:
    # Scripts rely on it: `testbed run SPEC` ends with the folder, for every kind of spec.
    spec = tmp_path / "tiny.toml"
    spec.write_text(
        'name = "tiny"\nengine = "sim"\n[topology]\nref = "planetlab"\nhosts = 6\n'
        '[[phases]]\naction = "join"\ncount = 6\nover_s = 5\nsettle_s = 20\n'
    )
    result = CliRunner().invoke(cli, ["run", str(spec), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == str(tmp_path / "run")
