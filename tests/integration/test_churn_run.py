# Executing churn schedules: the executor's effect on an engine (a recording
# fake), frozen peers in the simulator, whole runs and campaigns in the
# simulator (the emulator's counterpart is tests/integration/netns/test_churn_emu.py).

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.peer import NodeConfig
from testbed.churn import Executor, Quiet, Universe, compile_churn, parse_churn
from testbed.errors import InputError
from testbed.experiments.campaign import _row, run_campaign
from testbed.experiments.overlay import churn_schedule, run_experiment, select_topology
from testbed.linkmodel import LinkModel
from testbed.sim import Simulator
from testbed.spec import load_spec

from .conftest import SMALL as CAN_SMALL

NAMES = [f"h{k}" for k in range(1, 7)]


class Recorder:
    """An engine that records the verbs it is given."""

    def __init__(self, leaving_s: float = 0.0) -> None:
        self.now = 0.0
        self.calls: list[tuple] = []
        self.matrices: list[np.ndarray] = []
        self.leaving_s = leaving_s  # how long a peer asked to leave takes to go
        self.gone_at: dict[int, float] = {}

    def departing(self) -> list[int]:
        return sorted(h for h, t in self.gone_at.items() if self.now < t)

    def advance(self, until: float) -> None:
        self.now = max(self.now, until)

    def leave(self, host: int) -> None:
        self.calls.append(("leave", host))
        self.gone_at[host] = self.now + self.leaving_s

    def crash(self, host: int) -> None:
        self.calls.append(("crash", host))

    def freeze(self, host: int) -> None:
        self.calls.append(("freeze", host))

    def thaw(self, host: int) -> None:
        self.calls.append(("thaw", host))

    def set_matrix(self, one_way_s: np.ndarray, why: str = "") -> None:
        self.matrices.append(one_way_s.copy())
        self.calls.append(("matrix", why))

    def partition(self, groups: list[list[int]]) -> None:
        self.calls.append(("partition", groups))

    def heal(self) -> None:
        self.calls.append(("heal",))

    def set_loss(self, rate: float, src: list[int] | None, dst: list[int] | None) -> None:
        self.calls.append(("loss", rate, src, dst))


def execute(script: str, frames=None, leaving_s: float = 0.0):
    schedule = compile_churn(parse_churn(script), Universe(NAMES, frames=18), seed=1)
    engine = Recorder(leaving_s)
    base = np.full((6, 6), 0.010)
    np.fill_diagonal(base, 0.0)
    joined: list[int] = []
    executor = Executor(schedule, engine, NAMES, base, join=joined.append, frames=frames)
    checks: list[Quiet] = []
    executor.run(5.0, checks.append)
    return executor, engine, joined, checks


def test_the_executor_drives_every_verb_in_order():
    executor, engine, joined, checks = execute(
        "at 0s join h1,h2,h3,h4\nat 10s freeze h2\nat 12s thaw h2\nat 14s crash h3\n"
        "from 20s to 25s partition h1 | h2\nat 30s set loss all 10%\n"
        "from 40s to 43s flap h1 -- h4 every 1s\nat 50s leave h4"
    )
    assert joined == [0, 1, 2, 3]
    assert engine.calls == [
        ("freeze", 1),
        ("thaw", 1),
        ("crash", 2),
        ("partition", [[0], [1]]),
        ("heal",),
        ("loss", 0.1, None, None),
        ("loss", 1.0, [0], [3]),
        ("loss", 1.0, [3], [0]),
        ("loss", 0.0, [0], [3]),
        ("loss", 0.0, [3], [0]),
        ("loss", 1.0, [0], [3]),
        ("loss", 1.0, [3], [0]),
        ("loss", 0.0, [0], [3]),
        ("loss", 0.0, [3], [0]),
        ("leave", 3),
    ]
    # Quiet periods, 1 s before the next event at most; all as quiet as the script allows.
    assert [c.t for c in checks] == [5, 19, 24, 29, 35, 48, 55]
    assert [c.quiet_s for c in checks] == [5, 5, 4, 4, 5, 5, 5]
    assert all(c.settled and not c.departing for c in checks)
    assert executor.expected == {0, 1}
    summary = executor.summary()
    assert summary["events_applied"] == summary["events_scheduled"] == 15
    assert summary["lateness_ms"]["max"] == 0.0


def test_a_quiet_period_starts_when_the_leavers_have_gone():
    # Leaves that take 3 s: the check waits for them, then settles 5 s.
    executor, engine, _, checks = execute(
        "at 0s join h1,h2,h3\nat 10s leave h2\nat 30s leave h3\nat 37s crash h1", leaving_s=3.0
    )
    # ...the second leave leaves 6 s before the next event: h3 goes at 33, so the check
    # waits until 38 for 5 s of quiet (2 s past the planned 36), and the crash moves to 39.
    assert [(c.t, c.quiet_s, c.settled, c.settle_wait_s) for c in checks] == [
        (5, 5, True, 0),
        (18, 5, True, 3),
        (38, 5, True, 3),
        (44, 5, True, 0),
    ]
    assert executor.summary()["shifted_s"] == 2
    assert executor.summary()["lateness_ms"]["max"] == 0.0  # late against the shifted schedule
    _, _, _, slow = execute("at 0s join h1,h2\nat 10s leave h2\nat 14s crash h1", leaving_s=9.0)
    # No room between the leave and the crash; after the crash, the check waits for h2 (gone at 19).
    assert [(c.t, c.settled, c.departing) for c in slow] == [(5, True, ()), (24, True, ())]
    executor, engine, _, stuck = execute(
        "at 0s join h1,h2\nat 10s leave h2\nat 30s crash h1", leaving_s=60.0
    )
    # h2 goes at 70: the check waits for it and 5 s more; the crash moves by 46 s.
    assert [(c.t, c.settled, c.departing) for c in stuck] == [
        (5, True, ()),
        (75, True, ()),
        (81, True, ()),
    ]
    assert ("crash", 0) in engine.calls and executor.summary()["shifted_s"] == 46


def test_a_check_whose_wait_runs_out_is_unsettled():
    schedule = compile_churn(
        parse_churn("at 0s join h1,h2\nat 10s leave h2\nat 30s crash h1"), Universe(NAMES), seed=1
    )
    engine = Recorder(60.0)
    base = np.full((6, 6), 0.010)
    np.fill_diagonal(base, 0.0)
    executor = Executor(schedule, engine, NAMES, base, join=lambda h: None)
    checks: list[Quiet] = []
    executor.run(5.0, checks.append, wait_max_s=10.0)
    assert [(c.t, c.settled, c.departing, c.settle_wait_s) for c in checks] == [
        (5, True, (), 0),
        (25, False, (1,), 10),  # 10 s past its planned 15, h2 still leaving
        (45, False, (1,), 10),  # after the crash (on time at 30): still leaving at 35 + 10
    ]
    assert executor.summary()["shifted_s"] == 0


def test_latency_is_an_rtt_both_ways_and_comes_back_to_the_frame():
    frame = np.full((6, 6), 0.050)
    np.fill_diagonal(frame, 0.0)
    _, engine, _, _ = execute(
        "from 0s to 10s set latency h1,h2 -- h5 300ms\nat 20s frame 7", frames={7: frame}
    )
    during, after, switched = engine.matrices
    assert during[0, 4] == during[4, 0] == during[1, 4] == pytest.approx(0.150)
    assert during[0, 1] == pytest.approx(0.010) and during[0, 0] == 0.0
    assert after[0, 4] == pytest.approx(0.010)
    assert switched[0, 4] == pytest.approx(0.050)


def test_a_frozen_simulated_peer_reads_what_waited_when_thawed():
    space = Space([Dimension("x", 0.0, 1.0, virtual=True)])
    config = NodeConfig(CanConfig(space, update_interval_s=1.0, suspect_after_s=30.0))
    events: list[tuple[int, float, str]] = []
    sim = Simulator(
        LinkModel([[0.0, 0.01], [0.01, 0.0]]),
        seed=1,
        ips=["10.0.0.1", "10.0.0.2"],
        observer=lambda host, record: events.append((host, record["t"], record["kind"])),
    )
    rng = random.Random(1)
    for host in (0, 1):
        sim.start_peer(host, config, (rng.random(),))
    sim.join(0, [])
    sim.run_until(2.0)
    sim.join(1, [0])
    sim.run_until(10.0)
    assert sim.peers[1].member
    peer = sim.peers[1]
    handled: list[float] = []
    timer, receive = peer.handle_timer, peer.receive_datagram
    peer.handle_timer = lambda now: (handled.append(now), timer(now))[1]  # type: ignore[method-assign]
    peer.receive_datagram = lambda data, addr, now: (  # type: ignore[method-assign]
        handled.append(now),
        receive(data, addr, now),
    )[1]
    sim.freeze(1)
    sim.run_until(20.0)
    assert sim.frozen_hosts() == {1}  # ten seconds of the other's updates wait in its buffer
    assert [t for t in handled if t > 10.0] == []  # no timer ran, nothing was read
    sim.thaw(1)
    assert sim.frozen_hosts() == set()
    assert handled.count(20.0) >= 6  # the backlog read at once, then the late timer
    sim.run_until(25.0)
    assert max(handled) > 21.0  # it runs on


# The CAN tests' small grid, with a script instead of phases.
SMALL = {k: v for k, v in CAN_SMALL.items() if k != "phases"} | {
    "name": "churn-small",
    "seed": 2,
    "topology": {"ref": "planetlab", "hosts": 24, "pick": "random"},
}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_run_under_a_script_checks_after_each_quiet_period(tmp_path):
    script = write(
        tmp_path,
        "s.churn",
        "from 0s to 16s join 75%\nat 40s crash 2\nfrom 60s to 62s partition random 50%\n"
        "from 80s to 90s set latency all -- all 200ms\nat 100s frame 3\nat 120s churn 20%\n"
        "at 160s stop",
    )
    spec, data = load_spec(None, [f'churn.script="{script}"', "churn.settle_s=15"], defaults=SMALL)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["churn"]["events_applied"] == summary["churn"]["events_scheduled"]
    assert summary["churn"]["lateness_ms"]["max"] == 0.0  # virtual time is never late
    checks = summary["invariants"]["by_check"]
    assert [c["phase"] for c in checks] == [
        "quiet@30.1s", "quiet@55.0s", "quiet@77.0s", "quiet@115.0s", "quiet@139.0s",
    ]  # fmt: skip
    # The last check waited for the churn's leavers to go (within a poll), then 15 s.
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    gone = max(e["t"] for e in events if e["kind"] == "left")
    assert 120 < gone <= 126 and checks[-1]["t"] - 15 - gone < 0.5
    assert all(c["settled"] and c["quiet_s"] == 15 for c in checks), checks
    assert summary["invariants"]["violations"] == 0, checks  # a 2 s partition is below suspicion
    assert [c["members"] for c in checks] == [18, 16, 16, 16, 16]
    applied = [json.loads(line) for line in (run_dir / "applied.jsonl").read_text().splitlines()]
    assert {a["kind"] for a in applied} >= {"join", "crash", "partition", "heal", "frame", "leave"}
    schedule = (run_dir / "schedule.jsonl").read_text().splitlines()
    assert len(schedule) == len({(a["due_t"], a["kind"], a["line"]) for a in applied})


def test_a_simulated_flood_is_limited_per_source_and_the_overlay_holds(tmp_path):
    # 2,000 valid-looking Pings a second from a host without a peer to two peers: each
    # takes a stranger's burst and then 20 a second from that source (node/limits.py: a
    # host that only hears Pongs stays a stranger), drops the rest before decoding, and
    # the overlay is whole at every check.
    script = write(
        tmp_path,
        "f.churn",
        "from 0s to 10s join h1,h2,h3,h4,h5,h6,h7,h8,h9,h10\n"
        "from 20s to 40s flood h11 -- h2,h3 at 2000/s\nat 60s stop",
    )
    spec, data = load_spec(None, [f'churn.script="{script}"', "churn.settle_s=10"], defaults=SMALL)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    (flood,) = summary["floods"]
    assert (flood["host"], flood["targets"], flood["seconds"]) == ("h11", 2, 20.0)
    assert 0.99 * 40_000 <= flood["sent"] <= 40_000
    datagrams = summary["sim"]["peer_datagrams"]
    limit = 2 * (40 + 20 * 20)  # two peers: a stranger's burst, then its rate for 20 s
    # (to within the refill over the last slice and the links' delay)
    assert datagrams["dropped"]["rate_limited"] == pytest.approx(flood["sent"] - limit, abs=20)
    assert datagrams["rx"] == datagrams["accepted"] + sum(datagrams["dropped"].values())
    assert summary["invariants"]["violations"] == 0
    applied = [json.loads(line) for line in (run_dir / "applied.jsonl").read_text().splitlines()]
    assert [a["kind"] for a in applied if a["kind"] == "flood"] == ["flood", "flood"]


def test_violations_name_their_peers_and_the_events_behind_them(tmp_path):
    # With the overlay merge off (remember_dead_s = 0), a partition longer than
    # suspect_after_s splits the overlay for good (docs/can.md, "Overlay merge").
    script = write(
        tmp_path, "p.churn", "from 0s to 16s join 75%\nfrom 40s to 50s partition random 50%"
    )
    overrides = [f'churn.script="{script}"', "churn.settle_s=20", "node.remember_dead_s=0"]
    spec, data = load_spec(None, overrides, defaults=SMALL)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    bad = [c for c in summary["invariants"]["by_check"] if c["violations"]]
    assert bad, summary["invariants"]
    assert all(v["peers"] for v in bad[0]["first"])
    assert [(e["verb"], e["line"]) for e in bad[0]["events"]] == [("partition", 2), ("heal", 2)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_campaign_runs_scripts_by_seeds_into_one_table(tmp_path, jobs):
    a = write(tmp_path, "a.churn", "from 0s to 10s join 50%\nat 30s crash 1\nat 50s stop")
    b = write(tmp_path, "b.churn", "from 0s to 10s join 50%\nat 30s leave 2\nat 50s stop")
    overrides = [f'campaign.scripts=["{a}", "{b}"]', "campaign.seeds=[1, 2]", "churn.settle_s=15"]
    spec, _ = load_spec(None, overrides, defaults=SMALL)
    folder, result = run_campaign(spec, out=tmp_path / "campaign", jobs=jobs)
    assert result["status"] == "complete" and result["runs"] == 4
    assert [r["run"] for r in result["rows"]] == ["a-s1", "a-s2", "b-s1", "b-s2"]
    assert (
        result["events_applied"] == 4 * 12 + 2 * 1 + 2 * 2
    )  # joins, crashes, leaves (stops are no action)
    assert result["violations"] == result["checks_unsettled"] == result["leaves_abrupt"] == 0
    assert all(r["checks"] == 2 and r["checks_unsettled"] == 0 for r in result["rows"])
    assert result["settle_wait_s"]["max"] is not None
    assert result["repair_s"]["crashes"] == 2 and result["repair_s"]["p50"] > 0
    # Crash to takeover by script (b has no crash), pooled over its seeds.
    by_script = result["repair_s_by_script"]
    assert list(by_script) == [a, b] and by_script[b]["p50"] is None
    assert by_script[a]["max"] == max(v for r in result["rows"][:2] for v in r["values"])
    assert all(r["within_bound"] is None and r["flood_per_s"] is None for r in result["rows"])
    assert result["lateness_ms"]["p99"] == 0.0
    assert json.loads((folder / "campaign.json").read_text())["runs"] == 4
    assert (folder / "campaign.png").stat().st_size > 10_000


def test_a_campaign_counts_every_violation_and_the_unsettled_checks(tmp_path):
    # A run folder as run_experiment leaves it: one check after a full quiet
    # period, one whose wait for a slow leave ran out (its leaver still going):
    # strict checks, so its violations count too.
    run_dir = tmp_path / "x-s1"
    run_dir.mkdir()
    (run_dir / "applied.jsonl").write_text('{"kind": "leave", "lateness_ms": 0.0}\n')
    first = [{"kind": "gap", "peers": ["h1"], "detail": ""}]
    checks = [
        {"phase": "quiet@30.0s", "t": 30.0, "violations": 2, "by_kind": {"gap": 2}, "first": first,
         "settled": True, "quiet_s": 30.0, "departing": [], "settle_wait_s": 0.0},
        {"phase": "quiet@89.0s", "t": 89.0, "violations": 5, "by_kind": {"gap": 5}, "first": first,
         "settled": False, "quiet_s": 0.0, "departing": ["h7"], "settle_wait_s": 120.0},
    ]  # fmt: skip
    summary = {"status": "complete", "wall_s": 1.0, "churn": {"events_applied": 1},
               "invariants": {"violations": 7, "checked_at": [30.0, 89.0], "by_check": checks},
               "leaves": {"graceful": 3, "abrupt": 1}}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    violating: list[dict] = []
    row = _row(run_dir, "x.churn", 1, [], [], violating, {"crashes": 0, "unrepaired": 0})
    assert (row["violations"], row["checks_unsettled"], row["leaves_abrupt"]) == (7, 1, 1)
    assert row["settle_wait_s"]["max"] == 120.0 and row["waits"] == [0.0, 120.0]
    assert [(v["settled"], v["departing"]) for v in violating] == [(True, []), (False, ["h7"])]


def test_a_bad_script_stops_a_campaign_before_any_run(tmp_path):
    good = write(tmp_path, "a.churn", "at 0s join 4")
    bad = write(tmp_path, "b.churn", "at 0s join 4\nat 5s crash h99")
    overrides = [f'campaign.scripts=["{good}", "{bad}"]']
    spec, _ = load_spec(None, overrides, defaults=SMALL)
    with pytest.raises(InputError, match=r"b.churn:2:7: .*no host is named 'h99'"):
        run_campaign(spec, out=tmp_path / "campaign")
    assert not (tmp_path / "campaign").exists()


def test_a_run_driven_by_an_availability_trace(tmp_path):
    # Splay's on/off format: line k is host k; up, down, up, ... in seconds.
    lines = ["0"] * 8 + ["2 30 50", "3 35", "", "4"]
    trace = write(tmp_path, "avail.trace", "\n".join(lines) + "\n")
    overrides = [f'churn.trace="{trace}"', 'churn.trace_down="crash"', "churn.settle_s=12"]
    spec, data = load_spec(None, overrides, defaults=SMALL)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    applied = [json.loads(line) for line in (run_dir / "applied.jsonl").read_text().splitlines()]
    assert [(a["kind"], a["hosts"][0], a["due_t"]) for a in applied if a["due_t"] > 0] == [
        ("join", "h9", 2),
        ("join", "h10", 3),
        ("join", "h12", 4),
        ("crash", "h9", 30),
        ("crash", "h10", 35),
        ("join", "h9", 50),
    ]
    checks = summary["invariants"]["by_check"]
    assert [(c["phase"], c["members"]) for c in checks] == [
        ("quiet@16.0s", 11), ("quiet@47.0s", 9), ("quiet@62.0s", 10),
    ]  # fmt: skip
    assert summary["invariants"]["violations"] == 0, checks


def test_campaign_scripts_must_name_distinct_run_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write(tmp_path / "a", "x.churn", "at 0s join 4")
    two = write(tmp_path / "b", "x.churn", "at 0s join 4")
    spec, _ = load_spec(None, [f'campaign.scripts=["{one}", "{two}"]'], defaults=SMALL)
    with pytest.raises(InputError, match="two scripts named 'x'"):
        run_campaign(spec, out=tmp_path / "campaign")


def test_a_campaign_spec_run_alone_says_how_to_run_it(tmp_path):
    script = write(tmp_path, "a.churn", "at 0s join 4")
    spec, data = load_spec(
        None, [f'campaign.scripts=["{script}"]', "churn.settle_s=10"], defaults=SMALL
    )
    with pytest.raises(InputError, match="testbed campaign"):
        run_experiment(spec, data, out=tmp_path / "run")


def test_a_takeover_before_the_crash_is_no_repair(tmp_path):
    # The frozen peer is taken over while frozen; when all 18 crash at 60 s (the
    # frozen one too), nothing is repaired: no negative repair time from its
    # earlier takeover.
    script = write(
        tmp_path,
        "f.churn",
        "from 0s to 16s join 75%\nfrom 30s to 90s freeze random 1 of all\nat 60s crash oldest 18\n",
    )
    spec, data = load_spec(None, [f'churn.script="{script}"', "churn.settle_s=15"], defaults=SMALL)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    repair = json.loads((run_dir / "summary.json").read_text())["repair_s"]
    assert repair["crashes"] == 18
    assert all(value >= 0 for value in repair["values"])


def test_a_map_per_seed_is_the_map_the_frames_switch_on(tmp_path):
    # `{seed}` in an overlay spec's ref is the run's seed everywhere it is read: the hosts,
    # and the frames a churn script switches to (they used to parse the raw ref).
    script = tmp_path / "frame.churn"
    script.write_text("at 5s frame 2\nat 10s stop\n")
    overrides = ['topology.ref="sharcnet:{seed}"', "topology.hosts=20", "seed=3"]
    spec, _ = load_spec(None, [*overrides, f'churn.script="{script}"'], defaults={"name": "x"})
    topology = select_topology(spec)
    assert topology.source.startswith("sharcnet(seed=3,")
    schedule = churn_schedule(spec, topology, [f"h{k + 1}" for k in range(topology.n)])
    assert [e.value for e in schedule.events if e.verb == "frame"] == [2]
    spec, data = load_spec(
        None, [*overrides, f'churn.script="{script}"', "churn.settle_s=3"], defaults={"name": "x"}
    )
    summary = json.loads(
        (run_experiment(spec, data, out=tmp_path / "run").dir / "summary.json").read_text()
    )
    assert summary["status"] == "complete" and summary["topology"] == topology.source
