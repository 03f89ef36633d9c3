# The compiled data path's own features (bandwidth, queues, duplication) and
# reordering; test_engine_core.py runs the shared behaviour on both data paths.
from __future__ import annotations

import pytest

from testbed.errors import ControlError
from testbed.linkmodel import Bandwidth, LinkModel, Reorder
from testbed.net.delay import _fast
from testbed.net.delay._nfqueue import NF_DROP

BASE = 0x0A000000


def ip(k: int) -> int:
    return BASE + k + 1


def fast(offset_s=0.0):
    delays = [[0.0, 0.010, 0.020], [0.030, 0.0, 0.005], [0.020, 0.005, 0.0]]
    return _fast.FastCore(LinkModel(delays), ip_base=BASE, seed=0, path_offset_s=offset_s)


def test_a_path_bandwidth_serialises_packets_behind_each_other():
    c = fast()
    # 8 Mbit/s = 1 MB/s: a 1,000-byte packet takes 1 ms on the wire, then the 10 ms delay.
    c.model.set_bandwidth(Bandwidth(8.0, queue_bytes=3000), src=[0], dst=[1])
    for k in range(4):
        c.packet_in(k, 1.0, ip(0), ip(1), 1000, now=1.0)
    # the queue holds 3,000 bytes: the first is on the wire at once, so 3 are queued;
    # the fourth found 3,000 bytes ahead of it and was dropped
    assert c.drops["queue"] == 1
    dues = []
    for _ in range(3):
        due = c.next_due()
        dues.append(due)
        c.release_due(due)
    assert dues == pytest.approx([1.011, 1.012, 1.013])
    # the other direction has no bandwidth: only its delay
    c.packet_in(9, 2.0, ip(1), ip(0), 1000, now=2.0)
    assert c.next_due() == pytest.approx(2.030)


def test_a_packet_limit_counts_queued_packets():
    c = fast()
    c.model.set_bandwidth(Bandwidth(8.0, queue_packets=2), src=[0], dst=[1])
    verdicts = [c.packet_in(k, 1.0, ip(0), ip(1), 1000, now=1.0) for k in range(4)]
    assert verdicts == [None, None, NF_DROP, NF_DROP]
    # 2 ms later both have left the wire: room again
    assert c.packet_in(5, 1.0025, ip(0), ip(1), 1000, now=1.0025) is None


def test_reordering_holds_the_chosen_packets_longer():
    c = fast()
    c.model.set_reorder(Reorder(1.0, 5.0), src=[0], dst=[1])
    c.packet_in(1, 1.0, ip(0), ip(1), 60, now=1.0)
    assert c.next_due() == pytest.approx(1.015)  # 10 ms + the 5 ms gap
    c.model.set_reorder(None, src=[0], dst=[1])
    c.packet_in(2, 1.001, ip(0), ip(1), 60, now=1.001)
    assert [pid for pid, _ in c.release_due(2.0)] == [2, 1]  # overtaken


def test_duplicated_packets_are_marked_for_the_core_to_copy():
    c = fast()
    c.model.set_duplicate(1.0, src=[0], dst=[1])
    c.packet_in(1, 1.0, ip(0), ip(1), 60, now=1.0)
    c.packet_in(2, 1.0, ip(1), ip(0), 60, now=1.0)
    assert c.figures()["duplicated"] == 1


def test_rejected_bandwidth_settings_change_nothing():
    model = LinkModel([[0.0, 0.01], [0.01, 0.0]])
    version = model.version
    for bad in (
        {"rate_mbit": 0.0, "queue_bytes": 3000},
        {"rate_mbit": 10.0},  # no queue
        {"rate_mbit": 10.0, "queue_bytes": 3000, "queue_packets": 5},  # both
        {"rate_mbit": 10.0, "queue_bytes": 100},  # not one packet
        {"rate_mbit": 10.0, "queue_bytes": 3000, "ecn_bytes": 3000},
    ):
        with pytest.raises(ControlError) as info:
            model.set_bandwidth(Bandwidth(**bad))
        assert info.value.field  # names the field
    with pytest.raises(ControlError, match="probability"):
        Reorder(1.5, 5.0)
    assert model.version == version
    assert model.describe()["bandwidth_all"] is None


def test_the_simulator_model_reorders_too():
    import random

    model = LinkModel([[0.0, 0.01], [0.01, 0.0]])
    model.set_reorder(Reorder(1.0, 5.0))
    assert model.fate(0, 1, random.Random(0)) == pytest.approx(0.015)
    assert model.needs_fast_path() == []
    model.set_duplicate(0.1)
    assert model.needs_fast_path() == ["duplication"]
