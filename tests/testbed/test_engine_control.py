# The engine's control requests, without the kernel: DelayEngine.handle_request
# is the whole request path except the socket.

from __future__ import annotations

import json
import re

import pytest

from testbed.net.delay import write_delay_file
from testbed.net.delay._server import DelayEngine, EngineConfig


@pytest.fixture
def engine(tmp_path):
    n = 4
    matrix = [[0.0 if i == j else 0.010 for j in range(n)] for i in range(n)]
    write_delay_file(tmp_path / "m.f64", matrix)
    config = EngineConfig(
        hosts=n,
        ip_base=0x0A000000,
        matrix_path=str(tmp_path / "m.f64"),
        control_path=str(tmp_path / "c.sock"),
        log_path=str(tmp_path / "engine.log"),
        floor_one_way_s=0.0001,
    )
    eng = DelayEngine(config)
    yield eng
    eng._log.close()


def call(engine, **request):
    return engine.handle_request(json.dumps(request).encode())


def state(engine):
    return call(engine, op="describe")["result"]


def test_accepted_requests_change_the_model_and_are_logged(engine, tmp_path):
    assert call(engine, op="set_delay", one_way_s=0.05, src=[0], dst=[1, 2]) == {
        "ok": True,
        "result": {"pairs": 2, "clamped": 0},
    }
    assert engine.model.one_way_s(0, 2) == 0.05
    assert call(engine, op="partition", groups=[[0, 1]])["ok"]
    assert state(engine)["groups"] == [1, 1, 0, 0]
    assert call(engine, op="heal")["ok"]
    assert call(
        engine, op="set_jitter", jitter={"dist": "normal", "sigma_ms": 1.0}, src=None, dst=None
    )["ok"]
    assert state(engine)["jitter_all"] == {"dist": "normal", "sigma_ms": 1.0}
    log = [json.loads(line) for line in (tmp_path / "engine.log").read_text().splitlines()]
    assert [entry["op"] for entry in log if entry["kind"] == "control"] == [
        "set_delay",
        "partition",
        "heal",
        "set_jitter",
    ]


@pytest.mark.parametrize(
    ("request_", "error", "field"),
    [
        ({"op": "nope"}, "unknown operation", None),
        ({"op": "set_delay"}, "missing argument", "one_way_s"),
        ({"op": "set_delay", "one_way_s": "fast"}, "expected int or float, got str", "one_way_s"),
        ({"op": "set_delay", "one_way_s": 0.1, "srcs": [0]}, "unknown argument", "srcs"),
        (
            {"op": "set_delay", "one_way_s": 0.1, "src": [0, 4]},
            r"no host h5 \(index 4\); hosts are h1..h4",
            "src",
        ),
        (
            {"op": "set_delay", "one_way_s": 0.1, "src": [True]},
            "expected a list of host indices",
            "src",
        ),
        (
            {"op": "set_delay", "one_way_s": 0.00001},
            "below the engine's measured floor of 0.100 ms",
            "one_way_s",
        ),
        ({"op": "set_delay", "one_way_s": 1e9}, "is not a delay", "one_way_s"),
        ({"op": "host_down", "host": 9}, "no host with index 9", "host"),
        ({"op": "host_down", "host": True}, "expected int, got bool", "host"),
        ({"op": "set_loss", "rate": 2}, "must be within 0..1", "rate"),
        ({"op": "partition", "groups": [[0, 1], [1]]}, "h2 is in two groups", "groups"),
        (
            {"op": "scale", "factor": 0.001},
            r"12 one-way delay\(s\) below the engine's measured floor",
            None,
        ),
        (
            {"op": "set_jitter", "jitter": {"dist": "normal", "sigma": 1}},
            "unknown parameter",
            "sigma",
        ),
        ({"op": "load_matrix", "path": "/nonexistent/m.f64"}, "cannot read", "path"),
        ({"op": "one_way"}, "missing argument", "pairs"),
        ({"op": "one_way", "pairs": [[0, 1, 2]]}, r"list of \[src, dst\] pairs", "pairs"),
        ({"op": "one_way", "pairs": [[0, 4]]}, r"no host h5 \(index 4\)", "pairs"),
        (
            {"op": "set_calibration", "path_offset_s": -1, "floor_one_way_s": 0},
            "not within 0..0.1 s",
            "path_offset_s",
        ),
    ],
)
def test_rejected_requests_change_nothing(engine, request_, error, field):
    before = state(engine)
    answer = engine.handle_request(json.dumps(request_).encode())
    assert answer["ok"] is False
    assert answer["field"] == field
    assert re.search(error, answer["error"]), answer["error"]
    assert state(engine) == before


def test_malformed_requests_are_answered_not_raised(engine):
    for raw in (b"not json", b"[1, 2]", b'{"op": 5}', b"\xff\xfe", b""):
        answer = engine.handle_request(raw)
        assert answer["ok"] is False


def test_clamp_raises_to_the_floor_and_says_how_many(engine, tmp_path):
    answer = call(engine, op="scale", factor=0.001, clamp=True)
    assert answer == {"ok": True, "result": {"clamped": 12}}
    assert engine.model.one_way_s(0, 1) == pytest.approx(0.0001)
    low = [[0.0 if i == j else 0.00005 for j in range(4)] for i in range(4)]
    write_delay_file(tmp_path / "low.f64", low)
    assert call(engine, op="load_matrix", path=str(tmp_path / "low.f64"))["ok"] is False
    assert call(engine, op="load_matrix", path=str(tmp_path / "low.f64"), clamp=True)["result"] == {
        "clamped": 12
    }


def test_load_matrix_checks_the_size(engine, tmp_path):
    write_delay_file(tmp_path / "small.f64", [[0.0, 0.1], [0.1, 0.0]])
    answer = call(engine, op="load_matrix", path=str(tmp_path / "small.f64"))
    assert answer["ok"] is False and "expected 4 x 4" in answer["error"]


def test_stats_and_counters_shapes(engine):
    stats = call(engine, op="stats")["result"]
    for key in (
        "packets_in",
        "forwarded",
        "held",
        "drops",
        "lateness_us",
        "immediate_us",
        "early_us",
        "lead_us",
        "kernel",
    ):
        assert key in stats
    counters = call(engine, op="counters", reset=True)["result"]
    assert counters == {"hosts": 4, "pairs": []}  # sparse: no pair has talked
    assert call(engine, op="shutdown")["ok"] and engine._stopping


def test_one_way_answers_the_listed_pairs_only(engine):
    assert call(engine, op="set_delay", one_way_s=0.025, src=[2], dst=[0])["ok"]
    answer = call(engine, op="one_way", pairs=[[2, 0], [0, 2], [1, 3]])
    assert answer == {"ok": True, "result": {"one_way_s": [0.025, 0.010, 0.010]}}


def test_a_fidelity_monitor_of_one_host_says_it_has_nothing_to_sample(tmp_path):
    from testbed.errors import InputError
    from testbed.net import FidelityMonitor

    one = FidelityMonitor(["ns1"], ["10.0.0.1"], tmp_path / "c.sock", tmp_path / "f.jsonl")
    one.start()  # no thread, no engine connection
    summary = one.close()
    assert summary["samples"] == 0 and summary["rounds"] == 0 and summary["within_bound"] is None
    assert "nothing to sample" in summary["error"]
    with pytest.raises(InputError, match="namespace and an address"):
        FidelityMonitor(["a", "b"], ["10.0.0.1"], tmp_path / "c.sock", tmp_path / "g.jsonl")
    with pytest.raises(InputError, match="pairs must be > 0"):
        FidelityMonitor(["a", "b"], ["x", "y"], tmp_path / "c.sock", tmp_path / "h.jsonl", pairs=0)
