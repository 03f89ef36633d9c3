# Placing hosts on machines and the delays each machine's engine gets
# (testbed/net/_sites.py); the network itself runs in
# tests/integration/netns/test_cluster_wan.py.

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from testbed.errors import FloorError, InputError
from testbed.net import ClusterWan, place_hosts
from testbed.net._remote import Files
from testbed.runs import JsonLog, changed_files, read_appended, write_files
from testbed.spec import load_any_spec


def two_clusters(n: int, near: float = 1.0, far: float = 80.0) -> np.ndarray:
    """RTTs of two groups: the even hosts and the odd ones."""
    group = np.arange(n) % 2
    rtt = np.where(group[:, None] == group[None, :], near, far)
    np.fill_diagonal(rtt, 0.0)
    return rtt


def test_close_hosts_share_a_machine_and_shares_follow_the_machines():
    placement = place_hosts(two_clusters(16), [1.0, 1.0])
    assert [len(p) for p in placement] == [8, 8]
    assert {frozenset(k % 2 for k in p) for p in placement} == {frozenset({0}), frozenset({1})}
    uneven = place_hosts(two_clusters(12), [2.0, 1.0])
    assert [len(p) for p in uneven] == [8, 4]
    assert sorted(k for p in uneven for k in p) == list(range(12))


def stub(link_ms: float, floor_rtt_ms: float):
    loaded = []
    agent = SimpleNamespace(load_one_way_s=SimpleNamespace(remote=lambda m, c: loaded.append(m)))
    return SimpleNamespace(
        hosts=[SimpleNamespace(name=f"h{k + 1}") for k in range(4)],
        site_of={0: 0, 1: 0, 2: 1, 3: 1},
        link_ms=np.array([[0.0, link_ms], [link_ms, 0.0]]),
        floor_rtt_ms=floor_rtt_ms,
        agents=[agent, agent],
        _get=lambda refs: refs,
        one_way_s=None,
    ), loaded


def test_each_engine_gets_the_delays_less_the_machines_latency():
    cwan, loaded = stub(link_ms=2.0, floor_rtt_ms=0.2)
    one_way = np.full((4, 4), 0.010)
    np.fill_diagonal(one_way, 0.0)
    assert ClusterWan.load_compensated(cwan, one_way, clamp=False) == 0
    matrix = loaded[0]
    assert matrix[0, 1] == pytest.approx(0.010)  # same machine: as asked
    assert matrix[0, 2] == pytest.approx(0.008) and matrix[3, 1] == pytest.approx(0.008)


def test_a_pair_shorter_than_its_machines_latency_is_refused_naming_it():
    cwan, loaded = stub(link_ms=5.0, floor_rtt_ms=0.2)
    one_way = np.full((4, 4), 0.010)
    one_way[0, 2] = 0.004  # 4 ms one way between machines 5 ms apart
    np.fill_diagonal(one_way, 0.0)
    with pytest.raises(FloorError, match="h1") as caught:
        ClusterWan.load_compensated(cwan, one_way, clamp=False)
    assert loaded == [] and "h3" in str(caught.value)
    assert ClusterWan.load_compensated(cwan, one_way, clamp=True) == 1
    assert loaded[0][0, 2] == pytest.approx(0.0001)  # raised to the floor's half, past the link


# -- {run} of every machine gathered on the driver (testbed/net/_remote.py) ------------------------


class _Agent:
    """A machine's agent: its {run} folder."""

    def __init__(self, files):
        self.files = files


def _machines(tmp_path, count):
    agents = [_Agent(tmp_path / f"m{k + 1}") for k in range(count)]
    for agent in agents:
        agent.files.mkdir()

    def on_machines(fn, args):  # ClusterWan.on_machines, in this process
        return {k: fn(agents[k], *args[k]) for k in sorted(args)}

    return SimpleNamespace(agents=agents, on_machines=on_machines), agents


def _log_kinds(path):
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()]


def test_files_gather_here_spread_there_and_say_what_they_could_not_copy(tmp_path):
    cwan, (m1, m2) = _machines(tmp_path, 2)
    run = tmp_path / "run"
    run.mkdir()
    (run / "testbed.log").write_text("")
    log = JsonLog(run / "events.jsonl")
    files = Files(cwan, run, log)
    (m1.files / "views").mkdir()
    (m1.files / "views" / "h1.json").write_text("1")
    (m2.files / "views").mkdir()
    (m2.files / "views" / "h2.json").write_text("2")
    (m2.files / "testbed.log").write_text("a program's")  # the run folder's own: not copied
    assert files.gather() == 2
    assert (run / "views" / "h1.json").read_text() == "1"
    assert (run / "views" / "h2.json").read_text() == "2"
    assert (run / "testbed.log").read_text() == ""
    assert files.gather() == 0  # nothing changed
    assert not (m1.files / "views" / "h2.json").exists()
    files.gather(spread=True)  # each machine gets the other's, once
    assert (m1.files / "views" / "h2.json").read_text() == "2"
    assert (m2.files / "views" / "h1.json").read_text() == "1"
    assert files.gather(spread=True) == 0  # what was given is not gathered back
    (m2.files / "views" / "h1.json").write_text("1 from m2")  # both wrote it: the last wins
    assert files.gather() == 1 and (run / "views" / "h1.json").read_text() == "1 from m2"
    log.close()
    kinds = _log_kinds(run / "events.jsonl")
    assert kinds.count("files.skipped") == 1 and kinds.count("files.conflict") == 1


def test_mirrored_files_stay_in_their_folder(tmp_path):
    with pytest.raises(ValueError, match="not a file under"):
        write_files(tmp_path, {"../escape": b"x"})
    (tmp_path / "a.log").write_bytes(b"one\ntwo, half")
    assert read_appended(tmp_path, "*.log", {}) == {"a.log": b"one\n"}
    assert read_appended(tmp_path, "*.log", {"a.log": 4}, whole_lines=False) == {
        "a.log": b"two, half"
    }
    changed, stats = changed_files(tmp_path, {})
    assert changed == {"a.log": b"one\ntwo, half"} and changed_files(tmp_path, stats)[0] == {}


@pytest.mark.parametrize(
    ("cluster", "message"),
    [("local", 'a running cluster: "auto"'), ("nowhere", "'nowhere' is not a Ray cluster")],
)
def test_a_program_spec_names_a_running_cluster(cluster, message):
    defaults = {"kind": "program", "command": "true", "churn": {"script": "x.churn"}}
    with pytest.raises(InputError, match=message):
        load_any_spec(None, [f'cluster="{cluster}"'], defaults=defaults)
