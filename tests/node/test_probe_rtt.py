# The RTT prober (node/coord/probe.py) inside two sans-IO peers, with a
# hand-driven network of known one-way delays: the RTTs it reports are the
# delays, lost samples are counted, and the budget spaces the Pings.

from __future__ import annotations

import heapq
import itertools
import random

import pytest

from node.config import config_from_dict, config_to_dict
from node.coord.probe import ProbeConfig, summarize
from node.events import RttMeasured
from node.peer import NodeConfig, Peer
from node.wire import Codec, Pong

from .conftest import CAN

A, B, C = ("10.0.0.1", 7000), ("10.0.0.2", 7000), ("10.0.0.3", 7000)


class Net:
    """Delivers datagrams after a fixed one-way delay per (source, destination)."""

    def __init__(self, peers, delay, drop=lambda data, src, dst: False, late=0.0):
        self.late = late  # each peer takes in a datagram this long after it arrived
        self.peers = {p.address: p for p in peers}
        self.delay, self.drop = delay, drop
        self.heap: list = []
        self.count = itertools.count()
        self.sent: list[tuple[float, tuple, tuple]] = []
        self.events: list = []

    def drain(self, peer, now):
        for data, to in peer.datagrams_to_send(now):
            self.sent.append((now, peer.address, to))
            if not self.drop(data, peer.address, to):
                arrive = now + self.delay[peer.address, to]
                heapq.heappush(self.heap, (arrive, next(self.count), data, peer.address, to))
        while (event := peer.next_event()) is not None:
            self.events.append(event)

    def run(self, until):
        now = 0.0
        for peer in self.peers.values():
            self.drain(peer, now)
        while True:
            timers = [t for p in self.peers.values() if (t := p.get_timer()) is not None]
            nxt = min(timers + ([self.heap[0][0]] if self.heap else []), default=None)
            if nxt is None or nxt > until:
                return
            now = nxt
            if self.heap and self.heap[0][0] == now:
                _, _, data, src, dst = heapq.heappop(self.heap)
                taken = now + self.late
                self.peers[dst].receive_datagram(data, src, taken, now if self.late else None)
                self.drain(self.peers[dst], taken)
            else:
                for peer in self.peers.values():
                    peer.handle_timer(now)
                    self.drain(peer, now)


def peer(address, probe=None, seed=1):
    return Peer(
        NodeConfig(CAN, probe=probe or ProbeConfig()),
        address=address,
        point=(10.0, 0.5),
        rng=random.Random(seed),
    )


def test_rtts_are_the_path_delays_and_every_sample_is_reported():
    a, b, c = peer(A), peer(B, seed=2), peer(C, seed=3)
    delay = {(A, B): 0.010, (B, A): 0.030, (A, C): 0.100, (C, A): 0.100}
    net = Net([a, b, c], delay)
    assert a.measure_rtt(2, B, 0.0, samples=4) == 1
    assert a.measure_rtt(3, C, 0.0) == 2
    net.run(until=5.0)
    done = {e.target: e for e in net.events if isinstance(e, RttMeasured)}
    assert done[2].rtts == pytest.approx((0.040,) * 4) and done[2].lost == 0
    assert done[3].rtts == pytest.approx((0.200,) * 5) and done[3].request == 2
    assert a.prober.pending == 0 and b.prober.answered == 4 and c.prober.answered == 5
    assert a.get_timer() is None  # nothing left to do (the peers never joined the overlay)


def test_a_peer_late_to_take_in_datagrams_does_not_lengthen_the_rtt():
    # Both peers read each datagram 7 ms after it arrived (a busy process):
    # the sample runs from the Ping to the Pong's arrival, less the time the
    # answerer says it held the Ping.
    a, b = peer(A), peer(B, seed=2)
    net = Net([a, b], {(A, B): 0.010, (B, A): 0.030}, late=0.007)
    a.measure_rtt(2, B, 0.0, samples=3)
    net.run(until=5.0)
    [done] = [e for e in net.events if isinstance(e, RttMeasured)]
    assert done.rtts == pytest.approx((0.040,) * 3)
    # A Pong claiming a hold longer than the round trip is no sample.
    a.measure_rtt(2, B, 10.0, samples=1)
    [(data, _to)] = a.datagrams_to_send(10.0)
    nonce = Codec().decode_untrusted(data)[2].nonce  # an unkeyed grid: any codec reads it
    a.prober.handle_pong(Pong(nonce, held_us=50_000), 10.04, 10.04)
    assert a.prober.bad_holds == 1
    events = []
    while (event := a.next_event()) is not None:
        events.append(event)
    [late] = [e for e in events if isinstance(e, RttMeasured)]
    assert late.rtts == () and late.lost == 1


def test_lost_samples_are_counted_after_the_timeout():
    a, b = peer(A, ProbeConfig(samples=5, timeout_s=1.0)), peer(B, seed=2)
    pings = itertools.count()

    def drop_second_ping(data, src, dst):
        return src == A and next(pings) == 1

    net = Net([a, b], {(A, B): 0.05, (B, A): 0.05}, drop_second_ping)
    a.measure_rtt(2, B, 0.0)
    net.run(until=0.5)
    assert not [e for e in net.events if isinstance(e, RttMeasured)]  # one sample still out
    net.run(until=3.0)
    [done] = [e for e in net.events if isinstance(e, RttMeasured)]
    assert done.lost == 1 and len(done.rtts) == 4 and done.t == pytest.approx(0.02 + 1.0)


def test_the_budget_spaces_pings_across_targets():
    a = peer(A, ProbeConfig(samples=3, rate=10.0, interval_s=0.01))
    b, c = peer(B, seed=2), peer(C, seed=3)
    net = Net([a, b, c], {(A, B): 0.001, (B, A): 0.001, (A, C): 0.001, (C, A): 0.001})
    a.measure_rtt(2, B, 0.0)
    a.measure_rtt(3, C, 0.0)
    net.run(until=5.0)
    times = [t for t, src, _ in net.sent if src == A]
    assert len(times) == 6
    assert all(later - earlier >= 0.1 - 1e-9 for earlier, later in itertools.pairwise(times))


def test_stray_pongs_are_counted_and_the_queue_is_bounded():
    a = peer(A, ProbeConfig(max_pending=2))
    assert a.measure_rtt(2, B, 0.0) and a.measure_rtt(3, C, 0.0)
    assert a.measure_rtt(4, C, 0.0) is None

    a.prober.handle_pong(Pong(12345), 0.1)  # a nonce we never sent
    assert a.prober.unexpected == 1


def test_filters():
    samples = [10.0, 12.0, 11.0, 50.0, 10.5, 30.0, 10.2, 11.5]
    assert summarize(samples, "min") == 10.0
    assert summarize(samples, "median") == 11.25
    assert summarize(samples, "mean") == pytest.approx(18.15)
    assert summarize(samples, "lowest_quartile") == pytest.approx((10.0 + 10.2) / 2)
    assert summarize([5.0, 7.0], "lowest_quartile") == 5.0
    with pytest.raises(ValueError, match="unknown filter"):
        summarize(samples, "mode")


def test_probe_settings_travel_in_the_node_config_and_are_checked():
    config = NodeConfig(CAN, probe=ProbeConfig(samples=9, rate=50.0))
    assert config_from_dict(config_to_dict(config)).probe == config.probe
    data = config_to_dict(config)
    data["probe"]["sampels"] = 3
    with pytest.raises(ValueError, match="probe.sampels: unknown field"):
        config_from_dict(data)
    data["probe"] = {"samples": 0}
    with pytest.raises(ValueError, match="probe.samples must be an integer"):
        config_from_dict(data)


def test_in_the_simulator_rtts_follow_the_matrix_and_its_jitter():
    from testbed.linkmodel import Jitter, LinkModel
    from testbed.sim import Simulator

    one_way = [[0.0, 0.010, 0.040], [0.030, 0.0, 0.005], [0.040, 0.005, 0.0]]
    records: list[tuple[int, dict]] = []
    sim = Simulator(
        LinkModel(one_way),
        seed=3,
        ips=["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        observer=lambda host, record: records.append((host, record)),
    )
    for host in range(3):
        sim.start_peer(host, NodeConfig(CAN), (10.0, 0.5))
    sim.measure_rtt(0, 1, samples=3)
    sim.run_until(5.0)
    [(host, done)] = [(h, r) for h, r in records if r["kind"] == "rtt"]
    assert host == 0 and done["target"] == 1 and done["rtts"] == pytest.approx([0.040] * 3)
    sim.model.set_jitter(Jitter("uniform", width_ms=2.0))
    sim.measure_rtt(0, 2, samples=50)
    sim.run_until(10.0)
    rtts = [r for h, r in records if r["kind"] == "rtt"][-1]["rtts"]
    assert len(rtts) == 50 and min(rtts) >= 0.076 and max(rtts) <= 0.084
    assert max(rtts) - min(rtts) > 0.002  # the jitter shows
