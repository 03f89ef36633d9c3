from __future__ import annotations

import random
import statistics

import pytest

from testbed.errors import ControlError
from testbed.linkmodel import DROP_DOWN, DROP_LOSS, DROP_PARTITION, Jitter, LinkModel


def model(n=4):
    return LinkModel([[0.001 * (i + j) if i != j else 0.0 for j in range(n)] for i in range(n)])


def test_plain_delay_is_the_matrix_entry():
    m = model()
    rng = random.Random(0)
    assert m.fate(1, 3, rng) == pytest.approx(0.004)
    assert m.one_way_s(3, 1) == pytest.approx(0.004)


def test_partition_down_and_heal():
    m = model()
    rng = random.Random(0)
    m.partition([[0, 1]])  # 2 and 3 form the other group
    assert m.fate(0, 1, rng) > 0
    assert m.fate(2, 3, rng) > 0
    assert m.fate(0, 2, rng) == DROP_PARTITION
    assert m.blocked(3, 1) == DROP_PARTITION
    m.heal()
    assert m.fate(0, 2, rng) > 0
    m.set_down(2, True)
    assert m.fate(0, 2, rng) == DROP_DOWN
    assert m.fate(2, 1, rng) == DROP_DOWN
    assert m.blocked(2, 1) == DROP_DOWN
    m.set_down(2, False)
    assert m.blocked(2, 1) == 0.0


def test_loss_rate_is_honoured_per_pair():
    m = model()
    rng = random.Random(1)
    m.set_loss(0.3, src=[0], dst=[1])
    lost = sum(m.fate(0, 1, rng) == DROP_LOSS for _ in range(20_000))
    assert 0.28 < lost / 20_000 < 0.32
    assert all(m.fate(1, 0, rng) > 0 for _ in range(1000))  # the reverse direction is untouched
    m.set_loss(1.0)
    assert m.fate(2, 3, rng) == DROP_LOSS
    m.set_loss(0.0)
    assert m.fate(2, 3, rng) > 0


@pytest.mark.parametrize(
    ("jitter", "mean_ms", "sd_ms"),
    [
        (Jitter("normal", sigma_ms=2.0), 0.0, 2.0),
        (Jitter("uniform", width_ms=3.0), 0.0, 3.0 / 3**0.5),
        (Jitter("pareto", mean_ms=1.0, alpha=4.0), 1.0, None),
    ],
)
def test_jitter_distributions(jitter, mean_ms, sd_ms):
    m = LinkModel([[0.0, 0.1], [0.1, 0.0]])  # 100 ms: jitter never hits the zero clamp
    m.set_jitter(jitter, src=[0], dst=[1])
    rng = random.Random(2)
    offsets = [(m.fate(0, 1, rng) - 0.1) * 1e3 for _ in range(40_000)]
    assert statistics.fmean(offsets) == pytest.approx(mean_ms, abs=0.05)
    if sd_ms is not None:
        assert statistics.pstdev(offsets) == pytest.approx(sd_ms, rel=0.05)
    else:
        assert min(offsets) >= 0  # pareto is one-sided
    assert m.fate(1, 0, rng) == pytest.approx(0.1)


def test_jitter_never_makes_a_negative_delay():
    m = LinkModel([[0.0, 0.0001], [0.0001, 0.0]])
    m.set_jitter(Jitter("normal", sigma_ms=5.0))
    rng = random.Random(3)
    assert min(m.fate(0, 1, rng) for _ in range(5000)) == 0.0


def test_mutations_validate_before_changing_anything():
    m = model()
    before = (m.delay_matrix_s(), m.describe())
    with pytest.raises(ControlError, match="no host with index 9") as info:
        m.set_delay(0.5, src=[0, 9])
    assert info.value.field == "src"
    with pytest.raises(ControlError, match="h2 is in two groups"):
        m.partition([[0, 1], [1, 2]])
    with pytest.raises(ControlError, match="needs at least two groups"):
        m.partition([[0, 1, 2, 3]])
    with pytest.raises(ControlError, match="rate: must be within 0..1"):
        m.set_loss(1.5)
    with pytest.raises(ControlError, match="factor must be a positive number"):
        m.scale(0)
    with pytest.raises(ControlError, match="the largest delay would become"):
        m.scale(1e6)
    with pytest.raises(ControlError, match="this network has 4"):
        m.load([[0.0]])
    with pytest.raises(ControlError, match=r"entry \(0, 1\) is -1.0 s"):
        m.load([[0.0, -1.0, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    with pytest.raises(ControlError, match="no host with index True"):
        m.set_down(True, True)
    assert (m.delay_matrix_s(), m.describe()) == before


def test_bad_jitter_specs():
    with pytest.raises(ControlError, match="unknown distribution 'cauchy'"):
        Jitter("cauchy")
    with pytest.raises(ControlError, match="pareto needs alpha > 1"):
        Jitter("pareto", mean_ms=1.0, alpha=1.0)
    with pytest.raises(ControlError, match="must be a finite number >= 0") as info:
        Jitter("normal", sigma_ms=-1.0)
    assert info.value.field == "sigma_ms"


def test_scale_and_load_replace_delays():
    m = model()
    m.scale(2.0)
    assert m.one_way_s(1, 2) == pytest.approx(0.006)
    m.load([[0, 1, 2, 3], [1, 0, 1, 1], [2, 1, 0, 1], [3, 1, 1, 0]])
    assert m.one_way_s(0, 3) == 3
    assert m.set_delay(0.5, src=[0], dst=None) == 3
    assert m.one_way_s(0, 2) == 0.5 and m.one_way_s(2, 0) == 2
