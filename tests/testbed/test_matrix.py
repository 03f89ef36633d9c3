from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.errors import TopologyError
from testbed.topology import Topology, load_topology, planetlab_frame, read_matrix, write_matrix


def write(tmp_path, text, name="m.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_whitespace_matrix_with_comments(tmp_path):
    path = write(tmp_path, "# a comment\n0 10 20\n\n10 0 30\n20 30 0\n")
    topo = read_matrix(path)
    assert topo.n == 3
    assert topo.names == ("n0", "n1", "n2")
    assert topo.rtt_ms[0, 2] == 20.0
    assert topo.is_symmetric


def test_reads_csv_and_gzip(tmp_path):
    path = tmp_path / "m.csv.gz"
    with gzip.open(path, "wt") as out:
        out.write("0, 1.5\n2.5, 0\n")
    topo = read_matrix(path)
    assert topo.rtt_ms.tolist() == [[0.0, 1.5], [2.5, 0.0]]
    assert not topo.is_symmetric
    # asymmetric matrices: the pair RTT is d(i,j) + d(j,i) with d = entry / 2
    assert topo.pair_rtt_ms(0, 1) == pytest.approx(2.0)


def test_diagonal_is_forced_to_zero(tmp_path):
    topo = read_matrix(write(tmp_path, "5 1\n1 7\n"))
    assert topo.rtt_ms[0, 0] == 0 and topo.rtt_ms[1, 1] == 0


@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        ("0 1\n1 0 2\n", 2, None, r"row has 3 values but the first row \(line 1\) has 2"),
        ("0 1 2\n1 0 2\n", None, None, r"not square: 2 rows of 3 values; expected 3 rows"),
        ("0 1\n-3 0\n", 2, 1, r"negative latency -3"),
        ("0 -1\n1 0\n", 1, 2, r"-1 is a common missing-value marker"),
        ("0 nan\n1 0\n", 1, 2, r"missing value 'nan'"),
        ("0 NaN\n1 0\n", 1, 2, r"missing value 'NaN'"),
        ("0 inf\n1 0\n", 1, 2, r"infinite"),
        ("0 NA\n1 0\n", 1, 2, r"missing value 'NA'"),
        ("0,,1\n1,0,1\n1,1,0\n", 1, 2, r"missing value '\(empty\)'"),
        ("0 abc\n1 0\n", 1, 2, r"'abc' is not a number"),
        ("# only a comment\n", None, None, r"no matrix rows"),
    ],
)
def test_malformed_matrices_name_file_line_and_reason(tmp_path, text, line, column, reason):
    path = write(tmp_path, text)
    with pytest.raises(TopologyError, match=reason) as info:
        read_matrix(path)
    assert info.value.source == str(path)
    assert info.value.line == line
    assert info.value.column == column
    assert str(info.value).startswith(str(path))


def test_missing_and_binary_files_are_rejected(tmp_path):
    with pytest.raises(TopologyError, match="no such matrix file"):
        read_matrix(tmp_path / "absent.txt")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(TopologyError, match="not a text file"):
        read_matrix(binary)


def test_npy_matrices_are_validated(tmp_path):
    good = tmp_path / "good.npy"
    np.save(good, np.array([[0.0, 3.0], [3.0, 0.0]]))
    assert read_matrix(good).rtt_ms[0, 1] == 3.0
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([[0.0, np.nan], [3.0, 0.0]]))
    with pytest.raises(TopologyError, match=r"entry \(0, 1\) is nan"):
        read_matrix(bad)
    flat = tmp_path / "flat.npy"
    np.save(flat, np.zeros(4))
    with pytest.raises(TopologyError, match="must be square"):
        read_matrix(flat)


def test_write_then_read_round_trips(tmp_path):
    rng = np.random.default_rng(3)
    matrix = rng.uniform(0.01, 400.0, (7, 7))
    topo = Topology(matrix, tuple(f"x{k}" for k in range(7)))
    path = tmp_path / "out.txt.gz"
    write_matrix(topo, path)
    back = read_matrix(path)
    np.testing.assert_allclose(back.rtt_ms, topo.rtt_ms, rtol=1e-5)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789.,- \n\teE+naifx#", max_size=200))
def test_any_text_either_parses_or_raises_topology_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "m.txt"
    path.write_text(text)
    try:
        topo = read_matrix(path)
    except TopologyError as exc:
        assert exc.source == str(path)
    else:
        values = topo.off_diagonal()
        assert np.all(np.isfinite(values)) and np.all(values >= 0)


def test_planetlab_frames_are_bundled_and_match_the_published_facts():
    first = planetlab_frame(1)
    assert first.n == 490
    assert first.is_symmetric
    values = first.off_diagonal()
    assert values.min() > 0
    assert math.isclose(float(np.median(values)), 135.0, rel_tol=0.02)
    assert load_topology("planetlab:18").n == 490
    assert load_topology("planetlab").source == "planetlab:1"
    with pytest.raises(TopologyError, match="frames are 1..18"):
        load_topology("planetlab:19")
    with pytest.raises(TopologyError, match="not a known topology"):
        load_topology("no-such-thing")


def test_select_first_random_and_explicit():
    topo = planetlab_frame(1)
    first = topo.select(5)
    assert first.names == ("n0", "n1", "n2", "n3", "n4")
    np.testing.assert_array_equal(first.rtt_ms, topo.rtt_ms[:5, :5])
    a = topo.select(10, pick="random", seed=7)
    b = topo.select(10, pick="random", seed=7)
    c = topo.select(10, pick="random", seed=8)
    assert a.names == b.names != c.names
    explicit = topo.select(hosts=["n17", "n3", 42])
    assert explicit.names == ("n17", "n3", "n42")
    assert explicit.rtt_ms[0, 1] == topo.rtt_ms[17, 3]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"count": 491}, "asked for 491 hosts but the matrix has only 490"),
        ({"count": 0}, "host count must be a positive integer"),
        ({"count": 4, "pick": "random"}, "needs a seed"),
        ({"count": 4, "pick": "best"}, "pick must be 'first' or 'random'"),
        ({"hosts": ["n1", "n1"]}, "listed twice"),
        ({"hosts": ["h9x"]}, "unknown host 'h9x'"),
        ({"hosts": [490]}, "out of range"),
        ({"hosts": []}, "the host list is empty"),
    ],
)
def test_bad_selections_are_rejected(kwargs, reason):
    with pytest.raises(TopologyError, match=reason):
        planetlab_frame(1).select(**kwargs)


def test_scale_and_clamp():
    topo = Topology(np.array([[0, 0.05, 10], [0.05, 0, 20], [10, 20, 0]]), ("a", "b", "c"))
    doubled = topo.scaled(2)
    assert doubled.rtt_ms[0, 2] == 20
    clamped, count = topo.clamped(0.2)
    assert count == 2
    assert clamped.rtt_ms[0, 1] == clamped.rtt_ms[1, 0] == 0.2
    assert clamped.rtt_ms[0, 2] == 10
    assert topo.pairs_below(0.2) == [(0, 1), (1, 0)]
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(TopologyError, match="scale must be a positive finite number"):
            topo.scaled(bad)


def test_topologies_are_immutable():
    topo = planetlab_frame(1)
    with pytest.raises(ValueError, match="read-only"):
        topo.rtt_ms[0, 1] = 5.0
