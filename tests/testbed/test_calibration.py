# When calibration rounds are quiet enough (testbed.net._wan): a burst of
# scheduling noise must not become the engine's floor.

from __future__ import annotations

from testbed.net._wan import _quiet

# zero-delay RTTs in seconds, as measured here on a quiet machine: p50 0.14 ms, p90 0.2 ms
QUIET = [0.00012, 0.00013, 0.00014, 0.00014, 0.00015, 0.00016, 0.00018, 0.00019, 0.0002, 0.0003]


def test_a_quiet_round_and_a_burst_are_told_apart():
    assert _quiet([QUIET])
    # both cores busy: the same p50, but a fifth of the probes 2-6 ms late
    burst = [*QUIET[:8], 0.002, 0.006]
    assert not _quiet([burst])
    assert _quiet([burst, QUIET])  # the floor comes from the quiet round


def test_a_round_slowed_as_a_whole_is_not_quiet():
    # p50 0.5 ms and p90 1.4 ms: within 3x of its own median, but not of the
    # other round's 0.14 ms (a floor of 1.44 ms came from such a round once)
    slow = [0.0004, 0.00045, 0.0005, 0.0005, 0.0005, 0.0005, 0.0006, 0.0009, 0.0014, 0.002]
    assert not _quiet([slow, [*QUIET[:8], 0.002, 0.006]])


def test_a_very_fast_path_is_quiet_within_the_slack():
    # p50 20 us, p90 90 us: more than 3 times the median but within 0.1 ms of it
    assert _quiet([[0.00002] * 8 + [0.00009] * 2])
    assert not _quiet([[0.00002] * 8 + [0.0003] * 2])
