"""The flooder (testbed/net/flooder.py): what it sends, what it reports, what it refuses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from node.wire import Codec, Ping
from testbed.net.flooder import flood


def _receiver() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


def test_a_flood_is_well_formed_pings_round_robin_with_fresh_sequence_numbers():
    a, b = _receiver(), _receiver()
    try:
        targets = [a.getsockname(), b.getsockname()]
        report = flood(targets, 2000.0, seconds=0.5, seed=3)
        got_a, got_b = _drain(a), _drain(b)
    finally:
        a.close()
        b.close()
    assert report["send_errors"] == 0 and report["targets"] == 2
    assert 0.8 * 1000 <= report["sent"] <= 1000 * 1.05, report  # 0.5 s at 2,000/s
    assert len(got_a) + len(got_b) == report["sent"]  # loopback at 2,000/s loses nothing
    assert abs(len(got_a) - len(got_b)) <= 1  # round robin
    codec = Codec(None)
    decoded = [codec.decode_untrusted(d) for d in got_a + got_b]
    assert {type(m) for _s, _q, m in decoded} == {Ping}
    assert len({s for s, _q, _m in decoded}) == 1  # one made-up sender
    seqs = sorted(q for _s, q, _m in decoded)
    assert seqs == list(range(1, report["sent"] + 1))  # every one fresh for a replay window


def _main(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "testbed.net.flooder", "--report", str(tmp_path / "r.json")]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--to", "127.0.0.1:9", "--per-s", "0"], "--per-s must be > 0"),
        (["--to", "127.0.0.1:9", "--per-s", "10", "--nice", "-21"], "--nice must be"),
        (["--to", "127.0.0.1:9", "--per-s", "10", "--nice", "20"], "--nice must be"),
        (["--to", "127.0.0.1", "--per-s", "10"], "expected IP:PORT"),
    ],
)
def test_the_flooder_refuses_bad_arguments_and_says_which(args, says, tmp_path):
    done = _main(*args, tmp_path=tmp_path)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_flooder_runs_at_the_priority_asked_and_writes_its_report(tmp_path):
    receiver = _receiver()
    try:
        port = receiver.getsockname()[1]
        args = ["--to", f"127.0.0.1:{port}", "--per-s", "500", "--seconds", "0.3"]
        if os.geteuid() == 0:
            args += ["--nice", "-5"]  # the emulator's flooders run below 0, as root
        else:
            args += ["--nice", "5"]
        probe = (  # the flooder's main, then the priorities it left its process and session at
            "import os, sys; import testbed.net.flooder as f; rc = f.main(sys.argv[1:]);"
            "print(os.getpriority(os.PRIO_PROCESS, 0));"
            "print(f.AUTOGROUP.read_text().split()[-1] if f.AUTOGROUP.exists() else 'none');"
            "sys.exit(rc)"
        )
        report = tmp_path / "r.json"
        done = subprocess.run(
            [sys.executable, "-c", probe, *args, "--report", str(report)],
            capture_output=True,
            text=True,
            timeout=30,
            start_new_session=True,  # as the emulator starts it: a session of its own
        )
    finally:
        receiver.close()
    assert done.returncode == 0, done.stderr
    process, group = done.stdout.split()
    assert int(process) == int(args[-1])
    assert group in (args[-1], "none")  # the session's group too, where there are autogroups
    written = json.loads(report.read_text())
    assert written["targets"] == 1 and written["per_s_asked"] == 500.0
    assert 0.8 * 150 <= written["sent"] <= 150 * 1.1, written
