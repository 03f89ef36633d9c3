from __future__ import annotations

import pytest

from testbed.errors import EmulationError
from testbed.net._plan import NETNS_PREFIX_RE, plan_network


def test_names_addresses_and_macs_derive_from_the_index():
    plan = plan_network(300, "abc123")
    h1, h256 = plan.hosts[0], plan.hosts[255]
    assert (h1.name, h1.ip, h1.netns, h1.core_ifname) == ("h1", "10.0.0.1", "tbabc123-h1", "h1")
    assert (h256.name, h256.ip) == ("h256", "10.0.1.0")
    assert h1.mac == "02:00:00:00:00:01" and h1.core_mac == "02:01:00:00:00:01"
    assert plan.hosts[299].mac == "02:00:00:00:01:2c"
    assert plan.core_ip == "10.255.255.254"
    assert plan.core_netns == "tbabc123-core"
    assert plan.ip_base == 0x0A000000
    assert len({h.ip for h in plan.hosts}) == 300
    assert all(NETNS_PREFIX_RE.match(name) for name in plan.netns_names)


def test_small_subnets_and_bad_arguments_are_refused():
    assert len(plan_network(5, "abcd", subnet="192.168.7.0/29").hosts) == 5
    with pytest.raises(EmulationError, match="holds at most 5 hosts, not 6"):
        plan_network(6, "abcd", subnet="192.168.7.0/29")
    with pytest.raises(EmulationError, match="run id must be 4 to 8 lowercase hex digits"):
        plan_network(2, "XYZ!")
    with pytest.raises(EmulationError, match="positive integer"):
        plan_network(0, "abcd")
    with pytest.raises(EmulationError, match="is not an IPv4 network"):
        plan_network(2, "abcd", subnet="10.0.0.1/8")


def test_cleanup_pattern_only_matches_our_names():
    assert NETNS_PREFIX_RE.match("tb1a2b3c-h17")
    assert NETNS_PREFIX_RE.match("tb1a2b3c-core")
    for other in ("tb-h1", "tbzzzz-h1", "mynet", "tb1a2b-h1x", "tb1a2b3c4d5-h1"):
        assert not NETNS_PREFIX_RE.match(other)
