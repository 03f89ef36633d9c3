# Which calibration rounds count as quiet (testbed.emu._wan): a burst of
# scheduling noise must not become the engine's floor.

from __future__ import annotations

from testbed.emu._wan import _quiet_round


def test_a_quiet_round_and_a_burst_are_told_apart():
    # zero-delay RTTs in seconds, as measured here on a quiet machine: p50 0.14 ms, p90 0.2 ms
    quiet = [0.00012, 0.00013, 0.00014, 0.00014, 0.00015, 0.00016, 0.00018, 0.00019, 0.0002, 0.0003]
    assert _quiet_round(quiet)
    # both cores busy: the same p50, but a fifth of the probes 2-6 ms late
    burst = [*quiet[:8], 0.002, 0.006]
    assert not _quiet_round(burst)


def test_a_very_fast_path_is_quiet_within_the_slack():
    # p50 20 us, p90 90 us: more than 3 times the median but within 0.1 ms of it
    fast = [0.00002] * 8 + [0.00009] * 2
    assert _quiet_round(fast)
    assert not _quiet_round([0.00002] * 8 + [0.0003] * 2)
