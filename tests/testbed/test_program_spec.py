# kind = "program" specs: validated before anything starts, and the bundled
# example's script compiles on its hosts.

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.errors import InputError
from testbed.experiments.program import program_schedule
from testbed.spec import ProgramSpec, load_any_spec
from testbed.topology import resolve_topology

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "kind": "program",
    "command": "python3 my_peer.py --ip {ip}",
    "churn": {"script": "x.churn"},
}


def test_the_bundled_program_spec_loads_and_its_script_compiles(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec, _ = load_any_spec(ROOT / "scripts" / "experiments" / "gossip-emu.toml")
    assert isinstance(spec, ProgramSpec)
    schedule = program_schedule(spec, resolve_topology(spec.topology, spec.seed))
    verbs = {e.verb for e in schedule.events}
    assert {"join", "crash", "freeze", "thaw", "partition", "heal", "latency", "restart"} <= verbs


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('command=" "', "command: give the command a join starts on a host"),
        ("churn.settle_s=0", "churn.settle_s: must be a positive number of seconds"),
        ("leave_grace_s=-1", "leave_grace_s: must be a positive number of seconds"),
        ('check=""', "check: an empty command"),
        ('check_on="everyone"', "expected one of 'members', 'root'"),
        ('engine="sim"', "'emu'"),
        ("colour=1", "colour"),
    ],
)
def test_a_bad_program_spec_names_the_field(override, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_any_spec(None, [override], defaults=BASE)


def test_a_program_spec_needs_a_script_or_a_trace():
    with pytest.raises(InputError, match="give exactly one of script"):
        load_any_spec(None, [], defaults={**BASE, "churn": {}})
