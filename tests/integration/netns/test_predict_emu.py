# Latency prediction from real pings: peer processes in emulated hosts ping
# each other through the WAN core; the techniques read those pings.

from __future__ import annotations

import json

import numpy as np

from testbed.experiments.predict import run_prediction
from testbed.experiments.run import Report
from testbed.spec import load_any_spec

from .conftest import bound_ms, netns_of, run_id_of

SPEC = {
    "kind": "predict",
    "name": "predict-emu-small",
    "engine": "emu",
    "seeds": [1, 2],
    "probe_rate": 100.0,
    "topology": {"ref": "planetlab", "hosts": 10, "pick": "random", "clamp": True},
    "techniques": [
        {"kind": "dtm", "trees": 3, "samples": 3, "filter": "median"},
        {"kind": "gnp", "samples": 2, "filter": "min"},
    ],
}


def _close_pairs(samples, configured) -> int:
    """Ordered pairs whose median RTT is late by at most 10 % + 2 ms."""
    n = len(configured)
    return sum(
        float(np.median(samples[a][b])) <= configured[a, b] * 1.1 + 2.0
        for a in range(n)
        for b in range(n)
        if a != b
    )


def test_prediction_from_real_pings_matches_the_matrix_run(tmp_path):
    spec, data = load_any_spec(None, [], defaults=SPEC)
    # Real RTTs are late only by scheduling noise, which comes in bursts on a
    # shared machine (with both cores busy, a third of the pairs' medians came
    # 5-40 ms late once): most pairs must be close, and if too few are, the
    # run is made again once. A burst passes; a wrong delay would not.
    for attempt in range(2):
        pinged = []
        run = run_prediction(
            spec,
            data,
            out=tmp_path / f"run{attempt}",
            report=Report(ping=lambda done, n, pinged=pinged: pinged.append((done, n))),
        ).dir
        pings = json.loads((run / "pings.json").read_text())
        samples = pings["samples_ms"]
        configured = np.array(pings["configured_ms"])
        # never earlier than the configured matrix beyond the project's fidelity bound
        for a in range(10):
            for b in range(10):
                if a != b:
                    early = configured[a, b] - bound_ms(configured[a, b])
                    assert min(samples[a][b]) >= early, (a, b, samples[a][b])
        close = _close_pairs(samples, configured)
        if close >= 0.9 * 90:
            break
    assert close >= 0.9 * 90, f"{close} of 90 pairs close in both runs"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and pinged[-1] == (10, 10)
    # every ordered pair pinged 3 times (the most any technique takes), none lost
    assert all(len(samples[a][b]) == 3 for a in range(10) for b in range(10) if a != b)
    assert summary["pings"]["lost"] == 0
    # What the WAN delivered while every peer pinged every other: sampled, nothing lost.
    fidelity = summary["wan"]["fidelity"]
    assert fidelity["rounds"] >= 1 and fidelity["samples"] > 0 and fidelity["lost"] == 0
    assert 0 <= fidelity["error_p50_ms"] <= fidelity["error_p99_ms"]
    assert summary["pings"]["median_measurement_error"] < 0.05
    for name in ("dtm", "gnp"):
        emu, sim = summary["prediction"][name], summary["sim"][name]
        assert len(emu["per_seed"]) == 2 and len(sim["per_seed"]) == 2
        assert emu["probes_per_host"] == sim["probes_per_host"] or name == "dtm"
        assert abs(summary["emu_minus_sim"][name]["p50"]) < 0.1, summary["emu_minus_sim"]
    assert summary["prediction"]["gnp"]["probes_per_host"] == (4 * 6 + 6 * 5) / 10 * 2
    logs = sorted(p.stem for p in (run / "peers").glob("h*.jsonl"))
    assert len(logs) == 10
    assert netns_of(run_id_of(run / "wan")) == []
