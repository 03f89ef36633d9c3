# The input traps a new user fell into (issue "Your protocol, your programs",
# item 4): each now fails with a message that says what was expected, or is
# refused instead of doing nothing.

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.churn import Universe, compile_churn, parse_churn
from testbed.errors import ControlError, InputError
from testbed.linkmodel import Jitter, LinkModel


def test_a_latency_without_a_unit_is_an_error_not_seconds():
    with pytest.raises(InputError, match=r"a latency needs a unit: 120ms or 120s"):
        parse_churn("at 5s set latency h1 -- h2 120")
    (statement,) = parse_churn("at 5s set latency h1 -- h2 120ms")
    assert statement.value == pytest.approx(0.120)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("at 6x crash 4", "unexpected 'x' after 6; expected a time unit (6ms, 6s, 6m or 6h)"),
        ("from 2s to 5sec join 1", "unexpected 'sec' after 5; expected a time unit"),
        ("at 1m30 crash 1", "every number needs its unit, as in 1m30s"),
    ],
)
def test_a_bad_time_says_a_unit_is_expected(text, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_churn(text)


def test_the_schedule_json_has_units_and_every_side_of_a_partition():
    names = [f"h{k}" for k in range(1, 7)]
    script = "at 0s join all\nat 1s partition h1,h2\nat 2s heal\nat 3s set latency h1 -- h3 80ms\n"
    script += "at 4s set loss all 5%\n"
    schedule = compile_churn(parse_churn(script), Universe(names), seed=1)
    records = [json.loads(line) for line in schedule.to_jsonl().splitlines()]
    partition = next(r for r in records if r["verb"] == "partition")
    assert partition["sides"] == [["h1", "h2"], ["h3", "h4", "h5", "h6"]]
    latency = next(r for r in records if r["verb"] == "latency")
    assert latency["rtt_ms"] == 80.0 and latency["between"] == [["h1"], ["h3"]]
    assert next(r for r in records if r["verb"] == "loss")["loss_rate"] == 0.05
    assert all("t_s" in r and "value" not in r for r in records)


def test_host_names_in_the_engines_messages():
    model = LinkModel([[0.0, 0.01, 0.01], [0.01, 0.0, 0.01], [0.01, 0.01, 0.0]])
    with pytest.raises(ControlError) as caught:
        model.partition([[0, 1], [1, 2]])
    assert str(caught.value) == "partition: groups: h2 is in two groups"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"dist": "normal"}, "normal needs sigma_ms > 0"),
        ({"dist": "uniform", "sigma_ms": 2}, "uniform takes width_ms, not sigma_ms"),
        ({"dist": "pareto", "mean_ms": 1, "width_ms": 1}, "pareto takes mean_ms and alpha"),
        ({"dist": "normal", "sigma": 2}, "unknown parameter"),
        ({"sigma_ms": 2}, "missing"),
    ],
)
def test_jitter_without_its_parameter_is_refused_not_a_no_op(spec, message):
    with pytest.raises(ControlError, match=message):
        Jitter.from_dict(spec)
    assert Jitter.from_dict({"dist": "normal", "sigma_ms": 2}).to_dict() == {
        "dist": "normal",
        "sigma_ms": 2,
    }


def test_a_folder_named_testbed_in_the_current_folder_does_not_shadow_the_package(tmp_path):
    # A clone named `testbed` holds runs/ (run folders): from its parent folder,
    # `import testbed.runs` must still be the package's module (make installs the
    # package on sys.path, after the current folder, so a regular package wins).
    (tmp_path / "testbed" / "runs").mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-c", "import testbed.runs as r, testbed.net; print(r.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()) == Path(__file__).resolve().parents[2] / "testbed" / "runs.py"


def test_topology_show_prints_one_pairs_rtt_by_node_or_host_name():
    cli = [sys.executable, "-m", "testbed.cli", "topology", "show", "planetlab", "--hosts", "8"]
    out = subprocess.run(
        [*cli, "--pair", "n0,n5", "--pair", "h1,h6", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(out.stdout)["pairs"]
    assert rows[0] == rows[1] and rows[0]["host_b"] == "h6"
    assert rows[0]["rtt_ms"] == pytest.approx(2 * rows[0]["one_way_ms"]) and rows[0]["rtt_ms"] > 0
    bad = subprocess.run([*cli, "--pair", "h1,h99"], capture_output=True, text=True)
    assert bad.returncode == 2 and "no node or host named 'h99'" in bad.stderr
