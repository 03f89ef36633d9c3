# node/zygote.py: peers forked from one pre-loaded parent, driven over its socket (loopback
# only: the namespace part runs in tests/integration/netns, through the emulator).

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config import config_to_dict
from node.control import request_when_up
from node.peer import NodeConfig

from .conftest import CAN


class _Client:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.replies = self.sock.makefile("rb")

    def ask(self, request: object) -> dict[str, object]:
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        reply: dict[str, object] = json.loads(self.replies.readline())
        return reply

    def close(self) -> None:
        self.replies.close()
        self.sock.close()


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], _Client]]:
    path = tmp_path / "z.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "node.zygote", "--socket", str(path)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        proc.stdout.close()
        client = _Client(path)
        yield proc, client
        client.close()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(client: _Client, pid: int, timeout_s: float = 10.0) -> object:
    deadline = time.monotonic() + timeout_s
    while (code := client.ask({"op": "status", "pid": pid})["code"]) is None:
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.05)
    return code


def test_a_forked_peer_runs_answers_and_ends(zygote, tmp_path):
    proc, client = zygote
    config = tmp_path / "node.json"
    config.write_text(json.dumps(config_to_dict(NodeConfig(CAN))))
    control = str(tmp_path / "h1.ctl")
    args = [
        "--name", "h1",
        "--bind", f"127.0.0.1:{_free_port()}",
        "--config", str(config),
        "--point", "50,0.5",
        "--seed", "3",
        "--log", str(tmp_path / "h1.jsonl"),
        "--control", control,
        "--join", "",
    ]  # fmt: skip
    out, err = tmp_path / "h1.out", tmp_path / "h1.err"
    reply = client.ask(
        {"op": "spawn", "argv": args, "netns": None, "stdout": str(out), "stderr": str(err)}
    )
    pid = reply["pid"]
    assert isinstance(pid, int) and pid != proc.pid
    try:
        assert client.ask({"op": "status", "pid": pid}) == {"code": None}  # running
        answer = request_when_up(control, "status", running=lambda: True, wait_s=20.0)
        assert answer["status"] == "member"  # it founded an overlay
        assert os.getsid(pid) == pid  # a session (and process group) of its own
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert ppid == proc.pid  # forked by the zygote, not started by us
    finally:
        os.killpg(pid, signal.SIGTERM)
    assert _status(client, pid) == 0  # a signal ends a peer normally (it leaves)
    events = [json.loads(line)["kind"] for line in (tmp_path / "h1.jsonl").read_text().splitlines()]
    assert events[0] == "started" and "joined" in events
    # Reaped once: the status is given to the first asker only.
    assert client.ask({"op": "status", "pid": pid}) == {"code": None}


def _spawn_bad(client: _Client, folder: Path, name: str) -> int:
    """Spawn a peer with bad arguments (it exits 2 at once); its pid."""
    out, err = folder / f"{name}.out", folder / f"{name}.err"
    request = {"op": "spawn", "argv": ["--name", "x"], "netns": None}
    reply = client.ask({**request, "stdout": str(out), "stderr": str(err)})
    pid = reply["pid"]
    assert isinstance(pid, int), reply
    return pid


def test_a_spawned_child_leads_its_own_group_when_the_zygote_answers(zygote, tmp_path):
    # Rule 3 of node/zygote.py: a crash right after the answer must reach the process.
    # Each child (bad arguments: it exits at once) is killed by its group the moment the
    # answer comes; a child not yet in its own group would raise ProcessLookupError here.
    _, client = zygote
    for k in range(20):
        pid = _spawn_bad(client, tmp_path, str(k))
        assert os.getpgid(pid) == pid  # a zombie keeps its group until the zygote reaps it
        os.killpg(pid, signal.SIGKILL)
        assert _status(client, pid) in (2, -signal.SIGKILL)


def test_a_peer_with_bad_arguments_exits_2_with_the_message(zygote, tmp_path):
    _, client = zygote
    assert _status(client, _spawn_bad(client, tmp_path, "x")) == 2
    assert "--bind" in (tmp_path / "x.err").read_text()


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"op": "fly"}, "unknown op 'fly'"),
        ([1, 2], "unknown op None"),
        ({"op": "spawn", "argv": "python"}, "argv must be a list of strings"),
        ({"op": "spawn", "argv": [], "stdout": 3}, "stdout must be a path"),
        (
            {"op": "spawn", "argv": [], "stdout": "a", "stderr": "b", "netns": "/no/such/ns"},
            "no network namespace at '/no/such/ns'",
        ),
        ({"op": "status", "pid": "7"}, "pid must be an integer"),
    ],
)
def test_bad_requests_are_answered_with_what_was_expected(zygote, request_, error):
    _, client = zygote
    reply = client.ask(request_)
    assert error in str(reply.get("error")), reply
    assert client.ask({"op": "status", "pid": 1}) == {"code": None}  # still serving


def test_a_line_that_is_not_json_is_an_error_not_an_end(zygote):
    _, client = zygote
    client.sock.sendall(b"{nope\n")
    assert "not JSON" in json.loads(client.replies.readline())["error"]


def test_the_zygote_ends_when_its_client_hangs_up(zygote):
    proc, client = zygote
    client.close()
    assert proc.wait(10) == 0
