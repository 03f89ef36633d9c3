# Dynamic clusters inside an overlay run: peers get their first approximation
# from the testbed as they come and go, re-form their clusters after churn, and
# the checks after quiet periods judge every cluster (testbed/analysis/cluster_oracle.py).

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from testbed.analysis.cluster_oracle import check_clusters
from testbed.errors import InputError
from testbed.experiments.overlay import run_experiment
from testbed.spec import load_spec

from .conftest import SMALL

CLUSTERED = {k: v for k, v in SMALL.items() if k != "phases"} | {
    "name": "clusters-small",
    "topology": {"ref": "sharcnet:1", "hosts": 60, "pick": "random"},
    "clusters": {
        "diameter_ms": 0.010,
        "size": 8,
        "stable_s": 3.0,
        "wait_s": 1.0,
        "heartbeat_s": 1.0,
        "dead_after_s": 4.0,
        "report_timeout_s": 5.0,
    },
}


def test_clusters_re_form_after_crashes_and_joins(tmp_path):
    script = tmp_path / "c.churn"
    script.write_text("from 0s to 10s join 80%\nat 40s crash 10%\nat 70s join 10%\nat 110s stop\n")
    spec, data = load_spec(
        None, [f'churn.script="{script}"', "churn.settle_s=25"], defaults=CLUSTERED
    )
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    checks = summary["invariants"]["by_check"]
    assert [c["members"] for c in checks] == [48, 43, 49]
    assert summary["invariants"]["violations"] == 0, [c["first"] for c in checks]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    changes = [e for e in events if e["kind"] == "cluster"]
    # Clusters formed, then changed after the crash (members declared dead) and after the joins.
    assert any(e["own"] > 1 and e["t"] < 40 for e in changes)
    assert any(40 < e["t"] < 70 for e in changes) and any(e["t"] > 70 for e in changes)
    # Each check says how long after the last event the last cluster changed, within the quiet.
    reformed = [c["clusters"]["reformed_s"] for c in checks]
    assert all(0 < r < c["quiet_s"] for r, c in zip(reformed, checks, strict=True)), checks
    final = summary["clusters"]
    assert final["DYN"]["accuracy"] == final["DYN-SYM"]["accuracy"] == 1.0
    assert final["DYN"]["size_max"] <= 8 and final["DYN"]["membership_max"] <= 8
    assert final["DYN-SYM"]["peer_size_p50"] >= final["DYN"]["peer_size_p50"]


def dump(host: str, ip: str, own: list[str], advertised: list[str] | None = None, **state):
    return {
        "host": host,
        "address": [ip, 7000],
        "cluster": {
            "head": state.get("head", "STEADY"),
            "client": state.get("client", "STEADY"),
            "own": [[a, 7000] for a in own],
            "advertised": [[a, 7000] for a in (advertised or own)],
        },
    }


def test_the_cluster_oracle_names_every_kind_of_violation():
    names = ["a", "b", "c", "d"]
    ips = {n: f"10.0.0.{k + 1}" for k, n in enumerate(names)}
    hosts = {(ips[n], 7000): n for n in names}
    index = {n: k for k, n in enumerate(names)}
    rtt = np.full((4, 4), 0.005)
    rtt[0, 3] = rtt[3, 0] = 0.5  # a and d are far apart
    dumps = [
        dump("a", ips["a"], ["10.0.0.1", "10.0.0.2", "10.0.0.4"]),  # inaccurate (a-d)
        dump("b", ips["b"], ["10.0.0.2", "10.0.0.3"], client="MEASURE"),  # unsettled
        dump("c", ips["c"], ["10.0.0.3", "10.0.0.9"], ["10.0.0.1", "10.0.0.2"]),  # stale, foreign
        dump("d", ips["d"], ["10.0.0.4"]),
    ]
    found = check_clusters(dumps, rtt, index, hosts, diameter_ms=0.010, size=2, memberships=1)
    kinds = {(v.kind, tuple(v.peers)) for v in found}
    assert ("cluster-inaccurate", ("a", "a", "d")) in kinds
    assert ("cluster-unsettled", ("b",)) in kinds
    assert ("cluster-stale", ("c", "10.0.0.9:7000")) in kinds
    assert ("cluster-foreign", ("c",)) in kinds
    assert ("cluster-oversized", ("a",)) in kinds  # 3 > N = 2
    assert ("cluster-crowded", ("b",)) in kinds  # in a's and b's own clusters > M = 1
    # d is frozen, not gone: listing it is no violation.
    frozen = check_clusters(
        dumps[1:2], rtt, index, hosts, diameter_ms=1.0, size=9, memberships=9, frozen={"c"}
    )
    assert [v.kind for v in frozen] == ["cluster-unsettled"]


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("clusters.diameter_ms=0", "clusters.diameter_ms"),
        ("clusters.size=1", "clusters.size"),
        ("clusters.dead_after_s=0.5", "clusters.dead_after_s"),
        ("clusters.samples=0", "clusters.samples"),
        ("clusters.sise=3", "sise"),
    ],
)
def test_bad_cluster_tables_are_named(override, says):
    with pytest.raises(InputError, match=says):
        load_spec(None, [override], defaults=CLUSTERED)


def test_the_bundled_cluster_emu_spec_is_valid():
    spec, _ = load_spec(Path(__file__).parents[2] / "scripts" / "experiments" / "cluster-emu.toml")
    assert spec.engine == "emu" and spec.clusters is not None and spec.clusters.size == 16


@pytest.mark.parametrize("verify_s", [0.0, 20.0])
def test_heads_that_measure_again_follow_a_latency_change(tmp_path, verify_s):
    # Every latency goes to 1 ms (100 x D) at 60 s: the clusters formed before
    # are now inaccurate. Heads that verify every 20 s find it and shrink to
    # singletons; heads that never verify keep them, and the checks say so.
    script = tmp_path / "l.churn"
    script.write_text("from 0s to 10s join 80%\nat 60s set latency all -- all 1ms\nat 150s stop\n")
    overrides = [f'churn.script="{script}"', "churn.settle_s=25", f"clusters.verify_s={verify_s}"]
    spec, data = load_spec(None, overrides, defaults=CLUSTERED)
    summary = json.loads(
        (run_experiment(spec, data, out=tmp_path / "run").dir / "summary.json").read_text()
    )
    before, after = summary["invariants"]["by_check"]
    assert before["violations"] == 0 and before["clusters"]["own_size"]["max"] > 1
    if verify_s:
        assert after["violations"] == 0, after["first"]
        assert after["clusters"]["own_size"]["max"] == 1
    else:
        assert set(after["by_kind"]) == {"cluster-inaccurate"}
        assert all(len(v["peers"]) == 3 for v in after["first"])  # the head and the far pair
