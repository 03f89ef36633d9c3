# A topology spec's [[access]] and [[bandwidth]] tables: read, checked against the
# topology's nodes and labels, and carried through selection and scaling.
from __future__ import annotations

import pytest

from testbed.errors import TopologyError
from testbed.topology import load_topology

GRID = """
[sharcnet]
seed = 1
clusters = [4, 4]
inter = "planetlab:1"
"""


def spec(tmp_path, extra):
    path = tmp_path / "grid.toml"
    path.write_text(GRID + extra)
    return path


def test_links_are_read_and_kept_through_selection(tmp_path):
    path = spec(
        tmp_path,
        '[[access]]\nhosts = "cluster=c1"\ndown_mbit = 50\nqueue_bytes = 100000\n'
        '[[bandwidth]]\nsrc = "all"\ndst = "cluster=c0"\nrate_mbit = 20\nqueue_packets = 10\n',
    )
    topology = load_topology(path)
    access, bandwidth = topology.links
    assert (access.kind, access.hosts, access.down_mbit, access.queue_bytes) == (
        "access", "cluster=c1", 50.0, 100000,
    )  # fmt: skip
    assert (bandwidth.src, bandwidth.dst, bandwidth.rate_mbit) == ("all", "cluster=c0", 20.0)
    assert topology.select(3, pick="random", seed=1).scaled(2.0).links == topology.links
    assert "[[access]] #1" in access.where


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (
            '[[access]]\nhosts = "cluster=c9"\ndown_mbit = 5\nqueue_bytes = 9000\n',
            "matches no node",
        ),
        (
            '[[access]]\nhosts = "c1"\ndown_mbit = 5\nqueue_bytes = 9000\n',
            'expected "all", a label',
        ),
        ('[[access]]\nhosts = ["nope"]\ndown_mbit = 5\nqueue_bytes = 9000\n', "no such node"),
        ('[[access]]\nhosts = "all"\nqueue_bytes = 9000\n', "no rate given"),
        ('[[access]]\nhosts = "all"\ndown_mbit = 5\n', "queue_bytes or queue_packets"),
        ('[[access]]\nhosts = "all"\ndown_mbit = -5\nqueue_packets = 9\n', "down_mbit"),
        ('[[access]]\nhosts = "all"\ndown_mbit = 5\nqueue_bytes = 100\n', "one full frame"),
        (
            '[[bandwidth]]\nsrc = "all"\ndst = "all"\nrate_mbit = 5\nqueue_packets = 9\nbw = 1\n',
            "bw",
        ),
    ],
)
def test_bad_links_name_the_table_and_field(tmp_path, extra, says):
    with pytest.raises(TopologyError, match=says) as info:
        load_topology(spec(tmp_path, extra))
    assert "grid.toml" in str(info.value)
