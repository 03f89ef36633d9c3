# The CAN overlay in the simulator: scenarios with fixed seeds, determinism,
# and a hypothesis state machine of joins, leaves and crashes.

from __future__ import annotations

import json
import random
import weakref
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.peer import NodeConfig
from testbed.analysis.can_oracle import check_can
from testbed.experiments.overlay import churn_schedule, run_experiment, select_topology
from testbed.linkmodel import LinkModel
from testbed.sim import Simulator
from testbed.spec import ChurnSpec, load_spec

from .conftest import SMALL


def run_small(tmp_path, name, overrides=()):
    spec, data = load_spec(None, list(overrides), defaults=SMALL)
    return run_experiment(spec, data, out=tmp_path / name).dir


def test_churn_leaves_no_violation_after_each_quiet_period(tmp_path):
    run_dir = run_small(tmp_path, "a")
    summary = json.loads((run_dir / "summary.json").read_text())
    checks = summary["invariants"]["by_check"]
    assert [c["phase"] for c in checks] == ["build", "crash", "burst", "leave", "rejoin"]
    assert summary["invariants"]["violations"] == 0, checks
    assert [c["members"] for c in checks] == [32, 28, 24, 20, 28]
    assert all(c["routes_checked"] == 300 for c in checks)
    assert summary["repair_s"]["crashes"] == 8 and summary["repair_s"]["unrepaired"] == 0
    assert 0 < summary["repair_s"]["p50"] < 10
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = {e["kind"] for e in events}
    assert {"joined", "zone", "takeover", "crashed", "left", "command"} <= kinds


def test_a_phase_settles_after_its_last_action_as_applied_not_as_due(tmp_path):
    # Real peers can start late on a loaded machine (the emulator's joins ran 15 s late
    # under two test suites): the quiet period runs from the last action as applied.
    from testbed.engines.sim import SimEngine

    class SlowStarts(SimEngine):
        def start(self, host, point):
            self.advance(self.now + 1.0)  # a process that takes a second to start
            super().start(host, point)

    spec, data = load_spec(None, [], defaults=SMALL)
    run_experiment(spec, data, out=tmp_path / "run", make_engine=SlowStarts)
    run_dir = tmp_path / "run"
    actions = [json.loads(line) for line in (run_dir / "actions.jsonl").read_text().splitlines()]
    checks = [json.loads(line) for line in (run_dir / "checks.jsonl").read_text().splitlines()]
    for phase in SMALL["phases"]:
        last = max(a["sim_t"] for a in actions if a["phase"] == phase["name"])
        (check,) = [c for c in checks if c["phase"] == phase["name"]]
        assert check["t"] >= last + phase["settle_s"] - 1e-6, (phase["name"], last, check["t"])
    build = [a["sim_t"] for a in actions if a["phase"] == "build"]
    assert build[-1] - build[0] > SMALL["phases"][0]["over_s"] + 10  # the starts did run late
    assert checks[0]["violations"] == 0 and checks[0]["members"] == 32


def test_an_interrupted_run_says_how_far_the_simulator_got(tmp_path):
    from testbed.engines.sim import SimEngine

    class Failing(SimEngine):
        def crash(self, host):
            raise RuntimeError("boom")

    spec, data = load_spec(None, [], defaults=SMALL)
    with pytest.raises(RuntimeError, match="boom"):
        run_experiment(spec, data, out=tmp_path / "run", make_engine=Failing)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    checked = summary["invariants"]["checked_at"]
    assert len(checked) == 1  # the build phase, then the first crash failed
    sim = summary["sim"]
    assert sim["virtual_s"] >= checked[0] and sim["events"] > 0 and sim["datagrams"] > 0
    assert sim["max_rss_kb"] > 0 and "repair_s" not in summary


def test_same_seed_same_event_log_byte_for_byte(tmp_path):
    short = [
        "phases=[{action='join',count=20,over_s=10,settle_s=15},{action='crash',count=3,burst=3,settle_s=15}]"
    ]
    a = run_small(tmp_path, "a", short)
    b = run_small(tmp_path, "b", short)
    c = run_small(tmp_path, "c", [*short, "seed=4"])
    log_a = (a / "events.jsonl").read_bytes()
    assert log_a == (b / "events.jsonl").read_bytes()
    assert log_a.count(b"\n") > 60  # 20 joins and 3 crashes: joined, zone, command, takeover...
    assert log_a != (c / "events.jsonl").read_bytes()


def space3():
    return Space(
        [Dimension("cpu", 0, 500), Dimension("mem", 0, 16384), Dimension("v", 0, 1, virtual=True)]
    )


class ChurnMachine(RuleBasedStateMachine):
    """Random joins, leaves and crashes on 16 hosts; after letting things settle,
    every CAN invariant holds. Hypothesis shrinks a failure to a short list of steps."""

    HOSTS = 16

    def __init__(self) -> None:
        super().__init__()
        self.space = space3()
        self.config = NodeConfig(
            CanConfig(
                self.space,
                update_interval_s=1.0,
                suspect_after_s=3.0,
                probe_timeout_s=0.5,
                propose_timeout_s=1.0,
                join_timeout_s=4.0,
                retry_max_s=4.0,
                propose_scope="direct",
            )
        )
        n = self.HOSTS
        delays = [
            [0.0 if i == j else 0.005 + 0.002 * ((i * 7 + j * 3) % 10) for j in range(n)]
            for i in range(n)
        ]
        self.sim = Simulator(LinkModel(delays), seed=11, ips=[f"10.0.0.{k + 1}" for k in range(n)])
        self.rng = random.Random(5)
        self.expected: set[int] = set()

    def _start_join(self, host: int) -> None:
        point = (
            self.rng.choice([200.0, 300.0, 400.0]),
            self.rng.choice([1024.0, 4096.0]),
            self.rng.random(),
        )
        if host in self.sim.peers:
            self.sim.stop(host)
        self.sim.start_peer(host, self.config, point)
        members = sorted(h for h, p in self.sim.peers.items() if p.member)
        self.sim.join(
            host, members[:3] if members else ([min(self.expected)] if self.expected else [])
        )
        self.expected.add(host)

    @rule(host=st.integers(0, HOSTS - 1))
    def join(self, host):
        if host not in self.expected:
            self._start_join(host)

    @precondition(lambda self: len(self.expected) > 2)
    @rule(pick=st.integers(0, 1000))
    def leave(self, pick):
        host = sorted(self.expected)[pick % len(self.expected)]
        if self._members() == [host]:
            return  # the last member stays, or the joiners would have no overlay to join
        self.sim.leave(host)
        self.expected.discard(host)

    def _members(self) -> list[int]:
        return sorted(h for h, p in self.sim.peers.items() if p.member)

    @precondition(lambda self: len(self._members()) > 3)
    @rule(pick=st.integers(0, 1000), also_neighbour=st.booleans())
    def crash(self, pick, also_neighbour):
        # Only members crash, and two survive: a grid whose last members died has
        # nobody left to repair it (and that is no bug of the overlay).
        members = self._members()
        host = members[pick % len(members)]
        victims = [host]
        peer = self.sim.peers[host]
        if also_neighbour and peer.can.direct:
            # An adjacent zone dies at nearly the same moment.
            by_id = {p.can.id: h for h, p in self.sim.peers.items()}
            victims += [by_id[i] for i in sorted(peer.can.direct)[:1] if by_id.get(i) in members]
        for v in victims:
            self.sim.crash(v)
            self.expected.discard(v)

    @rule(seconds=st.floats(0.1, 3.0))
    def wait(self, seconds):
        self.sim.run_until(self.sim.now + seconds)

    @invariant()
    def settled_network_is_consistent(self):
        pass  # checked in teardown, after a quiet period (invariants need quiescence)

    def teardown(self) -> None:
        self.sim.run_until(self.sim.now + 45.0)
        # A joiner whose bootstraps all crashed keeps retrying them; as an operator
        # would, hand it live members once and let it finish.
        stuck = [h for h in sorted(self.expected) if self.sim.peers[h].status == "joining"]
        if stuck and self._members():
            for host in stuck:
                self.sim.join(host, self._members()[:3])
            self.sim.run_until(self.sim.now + 45.0)
        for host in [h for h, p in self.sim.peers.items() if p.status == "left"]:
            self.sim.stop(host)
        if not self.expected:
            return
        report = check_can(
            self.space,
            self.sim.dump_all(),
            expected_members=[f"h{h + 1}" for h in self.expected],
            routes=200,
        )
        assert report.ok, report.to_dict()


# Derandomized: the same 120 examples every run, so that CI is not a lottery. Larger random
# searches (e.g. 300 examples, several times) are for hunting, see the note in docs/can.md.
ChurnMachine.TestCase.settings = settings(
    derandomize=True,
    max_examples=120,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_churn_state_machine = ChurnMachine.TestCase


# The rare failure, found again (search 29 of 77 random searches of 300 examples, 2026-11-27
# at e289eaf): a peer and its neighbour crash while four joins are under way; half the space
# was left without an owner, for ever: the survivors knew the second dead peer only through
# the first and forgot it. Fixed by probing the hearsay peers beyond a dead region (docs/can.md).
def test_two_neighbours_crashing_during_joins_leave_no_gap():
    state = ChurnMachine()
    steps = [
        ("join", {"host": 0}), ("join", {"host": 14}), ("wait", {"seconds": 1.0}),
        ("join", {"host": 5}), ("leave", {"pick": 0}), ("join", {"host": 1}),
        ("join", {"host": 4}), ("wait", {"seconds": 0.5}), ("join", {"host": 2}),
        ("join", {"host": 0}), ("join", {"host": 3}), ("wait", {"seconds": 1.0}),
        ("crash", {"also_neighbour": True, "pick": 1}),
    ]  # fmt: skip
    for step, arguments in steps:
        getattr(state, step)(**arguments)
    state.teardown()  # settles, then checks every invariant


# run_until freezes what is alive (gc.freeze); a finished simulator stayed frozen for ever, and
# the random searches of ChurnMachine grew by 1.4 MB an example until the kernel killed them at
# 20 GB (2026-11-28). A new simulator thaws and collects the dead ones.
def test_a_new_simulator_collects_the_finished_ones(monkeypatch):
    import testbed.sim._simulator as simulator

    monkeypatch.setattr(simulator, "GC_THAW_SLACK", 10**12)  # no thaw meanwhile
    finished = []
    for _ in range(3):
        state = ChurnMachine()
        for host in (0, 1, 2):
            state.join(host)
        state.wait(2.0)
        assert len(state._members()) >= 1
        finished.append(weakref.ref(state.sim))
        del state
    assert all(ref() is not None for ref in finished)  # frozen: out of the collector's sight
    monkeypatch.setattr(simulator, "GC_THAW_SLACK", 0)
    monkeypatch.setattr(simulator, "_frozen_alive", 0)  # more frozen than twice what lives
    ChurnMachine()
    assert [ref() for ref in finished] == [None, None, None]


@pytest.mark.parametrize("scope", ["neighbourhood", "direct"])
def test_both_proposal_scopes_build_a_consistent_overlay(tmp_path, scope):
    short = [
        "phases=[{action='join',count=24,over_s=12,settle_s=40},{action='leave',count=4,over_s=4,settle_s=20}]",
        f"node.propose_scope='{scope}'",
    ]
    summary = json.loads((run_small(tmp_path, scope, short) / "summary.json").read_text())
    assert summary["invariants"]["violations"] == 0, summary["invariants"]


def test_a_crowded_build_completes_within_a_minute(tmp_path):
    short = [
        "topology.hosts=120",
        "phases=[{action='join',count=100,over_s=40,settle_s=60}]",
    ]
    # Capabilities take few values, so joiners crowd into the same zones: SPLITs
    # must run side by side and crossing MERGE/SPLITs must not starve each other.
    summary = json.loads((run_small(tmp_path, "crowded", short) / "summary.json").read_text())
    assert summary["invariants"]["by_check"][0]["members"] == 100
    assert summary["invariants"]["violations"] == 0


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name
        for p in (Path(__file__).parents[2] / "scripts" / "experiments").glob("*.toml")
        # Their own tests validate the other kinds.
        if not p.name.startswith(("predict-", "cluster-", "sched-", "gossip-"))
    ),
)
def test_the_bundled_specs_are_valid(name, monkeypatch):
    root = Path(__file__).parents[2]
    spec, _ = load_spec(root / "scripts" / "experiments" / name)
    hosts = spec.topology.hosts
    if spec.campaign is None and spec.churn is None:
        assert spec.phases and (hosts is None or hosts >= max(p.count or 0 for p in spec.phases))
        return
    # A campaign, or one churn script: every script compiles against the hosts of every seed.
    monkeypatch.chdir(root)
    if spec.campaign is not None:
        runs = [(a, b) for a in spec.campaign.scripts for b in spec.campaign.seeds]
    else:
        assert spec.churn is not None and spec.churn.script is not None
        runs = [(spec.churn.script, spec.seed)]
    for script, seed in runs:
        run = msgspec.structs.replace(spec, seed=seed, churn=ChurnSpec(script=script))
        topology = select_topology(run)
        schedule = churn_schedule(run, topology, [f"h{k + 1}" for k in range(topology.n)])
        assert schedule is not None and schedule.events


# Found by 95 random searches of 300 examples after the fix above (search 40, 2026-11-27 at
# 02266ea; it failed on fa2820b too): a peer crashes and the first member is restarted half a
# second after five joins, before any update period. Each side's survivor knew nobody alive
# across the root split (the dead were the only ones who had heard of them), its look into the
# other subtree had nobody to route to, and both took the other half: two overlays over one
# space (h5 alone, the other three). The overlay merge heals it (node/can/reunion.py): h5
# asks the address of the peer it buried, finds another overlay there, and rejoins it.
def test_crashes_before_the_first_update_period_leave_one_overlay():
    state = ChurnMachine()
    steps = [
        ("join", {"host": 0}), ("join", {"host": 4}), ("join", {"host": 2}),
        ("join", {"host": 1}), ("join", {"host": 5}), ("wait", {"seconds": 0.5}),
        ("crash", {"also_neighbour": False, "pick": 347}), ("leave", {"pick": 0}),
        ("join", {"host": 0}),
    ]  # fmt: skip
    for step, arguments in steps:
        getattr(state, step)(**arguments)
    state.teardown()


def test_partitions_of_every_shape_heal_into_one_overlay(tmp_path):
    # Each partition outlasts suspect_after_s: both sides bury each other and take over.
    # During it every side large enough is an overlay of its own; after the heal the
    # overlays find each other and merge (node/can/reunion.py).
    script = tmp_path / "partitions.churn"
    script.write_text(
        "from 0s to 16s join 80%\n"
        "from 50s to 80s partition random 50%\n"
        "from 110s to 140s partition islands 20% of 2 to 3\n"
        "from 170s to 230s partition islands 1 of 1\n"
        "from 260s to 275s join 10%\n"
        "from 262s to 292s partition random 50%\n"
        "at 330s stop\n"
    )
    overrides = ["phases=[]", f"churn.script='{script}'", "churn.settle_s=20"]
    summary = json.loads(
        (run_small(tmp_path, "partitions", overrides) / "summary.json").read_text()
    )
    checks = summary["invariants"]["by_check"]
    assert summary["invariants"]["violations"] == 0, checks
    during = [c for c in checks if c.get("sides")]
    assert [c["sides_unchecked"] for c in during] == [0, 2, 1, 0]  # islands and the lone peer
    after = [c for c in checks if not c.get("sides")]
    assert [c["members"] for c in after] == [32, 32, 32, 32, 36]  # one overlay each time
    assert summary["merges"]["peers"] > 0 and summary["merges"]["not_rejoined"] == 0
    heals = summary["partitions"]
    assert heals["healed"] == 4 and heals["never_one"] == 0
    assert 0 < heals["heal_to_one_s"]["max"] < 20


# Found by 43 random searches of 300 examples at the overlay merge's final code (search 10,
# 2026-11-27 at 8ab79ea; 42 passed): five joins, then, within the first update period, the
# founder and two more crash. The two survivors never heard of each other, and every peer
# either buried is dead: nobody can ask anybody, so two one-peer overlays stay over one space
# (docs/can.md, "Overlay merge": overlays that never meet). Kept as it was found, strict.
@pytest.mark.xfail(strict=True, reason="known: overlays that never meet stay two")
def test_survivors_that_never_met_end_in_one_overlay():
    state = ChurnMachine()
    steps = [
        ("join", {"host": 15}), ("join", {"host": 3}), ("join", {"host": 5}),
        ("join", {"host": 0}), ("join", {"host": 1}), ("wait", {"seconds": 0.5}),
        ("crash", {"also_neighbour": False, "pick": 104}),
        ("crash", {"also_neighbour": True, "pick": 0}),
    ]  # fmt: skip
    for step, arguments in steps:
        getattr(state, step)(**arguments)
    state.teardown()
