from __future__ import annotations

import random

import pytest

from testbed.linkmodel import LinkModel
from testbed.net.delay import _fast
from testbed.net.delay._core import DelayCore
from testbed.net.delay._nfqueue import NF_ACCEPT, NF_DROP

BASE = 0x0A000000  # 10.0.0.0: host index k is 10.0.0.(k+1)


def ip(k: int) -> int:
    return BASE + k + 1


# Every test runs on both data paths: the Python reference (DelayCore) and the
# compiled one (fastpath.c), which must agree packet for packet.
@pytest.fixture(params=["python", "c"], autouse=True)
def datapath(request):
    if request.param == "c":
        lib, why = _fast.load()
        assert lib is not None, f"the compiled data path is not built: {why}"
    return request.param


_current = {}


@pytest.fixture(autouse=True)
def _remember(datapath):
    _current["datapath"] = datapath


def core(offset_s=0.0):
    delays = [[0.0, 0.010, 0.020], [0.030, 0.0, 0.005], [0.020, 0.005, 0.0]]
    if _current["datapath"] == "c":
        return _fast.FastCore(LinkModel(delays), ip_base=BASE, seed=0, path_offset_s=offset_s)
    return DelayCore(LinkModel(delays), ip_base=BASE, rng=random.Random(0), path_offset_s=offset_s)


def test_holds_each_packet_for_its_pairs_delay_from_the_kernel_stamp():
    c = core()
    assert c.packet_in(1, 100.0, ip(0), ip(1), 84, now=100.0003) is None
    assert c.packet_in(2, 100.001, ip(1), ip(0), 84, now=100.0012) is None  # 30 ms the other way
    assert c.held == 2
    assert c.next_due() == pytest.approx(100.010)
    assert c.release_due(100.0099) == []
    assert c.release_due(100.0101) == [(1, NF_ACCEPT)]
    assert c.next_due() == pytest.approx(100.031)
    assert c.release_due(200.0) == [(2, NF_ACCEPT)]
    assert c.next_due() is None
    assert c.counters() == {"hosts": 3, "pairs": [[0, 1, 1, 84, 0], [1, 0, 1, 84, 0]]}


def test_releases_in_due_order_not_arrival_order():
    c = core()
    c.packet_in(1, 10.0, ip(0), ip(2), 100, now=10.0)  # due 10.020
    c.packet_in(2, 10.001, ip(1), ip(2), 100, now=10.001)  # due 10.006
    c.packet_in(3, 10.002, ip(0), ip(1), 100, now=10.002)  # due 10.012
    assert [pid for pid, _ in c.release_due(11.0)] == [2, 3, 1]


def test_path_offset_is_subtracted_and_overdue_packets_go_at_once():
    c = core(offset_s=0.002)
    c.packet_in(1, 5.0, ip(0), ip(1), 60, now=5.0)
    assert c.next_due() == pytest.approx(5.008)
    # arrived long ago (the engine was busy): forwarded immediately, counted
    assert c.packet_in(2, 5.0, ip(1), ip(2), 60, now=5.5) == NF_ACCEPT
    assert c.counters()["pairs"] == [[1, 2, 1, 60, 0]]  # packet 1 is still held
    assert c.immediate_s() == [pytest.approx(0.5)]


def test_missing_kernel_stamp_falls_back_to_now():
    c = core()
    c.packet_in(1, 0.0, ip(0), ip(1), 60, now=7.0)
    assert c.no_timestamp == 1
    assert c.next_due() == pytest.approx(7.010)


def test_foreign_and_self_packets_are_accepted_at_once():
    c = core()
    assert c.packet_in(1, 1.0, BASE + 200, ip(1), 60, now=1.0) == NF_ACCEPT
    assert c.packet_in(2, 1.0, ip(1), ip(1), 60, now=1.0) == NF_ACCEPT
    assert c.packet_in(3, 1.0, ip(0), 0x0B000001, 60, now=1.0) == NF_ACCEPT
    assert c.foreign == 3
    assert c.forwarded() == 0


def test_drops_are_counted_per_pair_and_reason():
    c = core()
    c.model.set_down(2, True)
    assert c.packet_in(1, 1.0, ip(0), ip(2), 60, now=1.0) == NF_DROP
    c.model.set_down(2, False)
    c.model.set_loss(1.0, src=[1], dst=[0])
    assert c.packet_in(2, 1.0, ip(1), ip(0), 60, now=1.0) == NF_DROP
    assert c.drops == {"loss": 1, "partition": 0, "down": 1, "queue": 0}
    assert c.counters()["pairs"] == [[0, 2, 0, 0, 1], [1, 0, 0, 0, 1]]


def test_a_partition_also_cuts_packets_already_in_flight():
    c = core()
    c.packet_in(1, 1.0, ip(0), ip(1), 60, now=1.0)
    c.packet_in(2, 1.0, ip(1), ip(2), 60, now=1.0)
    c.model.partition([[0]])
    out = dict(c.release_due(2.0))
    assert out == {1: NF_DROP, 2: NF_ACCEPT}
    assert c.drops["partition"] == 1


def test_release_error_statistics():
    c = core()
    c.packet_in(1, 1.0, ip(0), ip(1), 60, now=1.0)
    c.release_due(1.0101, now=1.0103)
    assert c.lateness_s() == [pytest.approx(0.0003)]
    assert c.last_release_error_s == pytest.approx(0.0003)
    c.release_due(2.0)
    assert c.last_release_error_s is None


def test_drain_all_returns_every_held_id_and_reset_clears_counters():
    c = core()
    c.packet_in(1, 1.0, ip(0), ip(1), 60, now=1.0)
    c.packet_in(2, 1.0, ip(0), ip(2), 60, now=1.0)
    assert sorted(c.drain_all()) == [1, 2]
    assert c.held == 0
    c.packet_in(3, 1.0, ip(0), ip(1), 60, now=1.5)
    c.reset_counters()
    assert c.forwarded() == 0
