"""A small UDP gossip protocol with a heartbeat failure detector: the example
program of docs/churn.md ("Churn for any program").

Every 0.2 s each node sends its heartbeat counter to every peer it knows of;
a peer not heard from for SUSPECT_S is taken for dead. The node writes the
peers it believes alive (and itself) to <views>/<name>.json, which the check
(check.py) compares with the hosts that should be up.

    python3 gossip.py --name {name} --ip {ip} --peers {peers} --views {run}/views
"""

import argparse
import json
import os
import signal
import socket
import sys
import time

PORT = 9000
PERIOD_S = 0.2
SUSPECT_S = 1.5


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--ip", required=True)
    parser.add_argument("--peers", required=True, help="comma-separated addresses")
    parser.add_argument("--views", required=True, help="folder for <name>.json")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    os.makedirs(args.views, exist_ok=True)
    view_path = os.path.join(args.views, f"{args.name}.json")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.ip, PORT))
    sock.settimeout(PERIOD_S / 4)
    heard: dict[str, tuple[str, float]] = {}  # address -> (name, when)
    beat = 0

    def leave(*_: object) -> None:
        for peer in peers:  # say goodbye, so that the others drop us at once
            sock.sendto(json.dumps({"name": args.name, "bye": True}).encode(), (peer, PORT))
        os.unlink(view_path) if os.path.exists(view_path) else None
        sys.exit(0)

    signal.signal(signal.SIGTERM, leave)
    next_beat = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_beat:
            beat += 1
            message = json.dumps({"name": args.name, "beat": beat}).encode()
            for peer in peers:
                sock.sendto(message, (peer, PORT))
            next_beat = now + PERIOD_S
            alive = sorted({name for name, when in heard.values() if now - when < SUSPECT_S})
            tmp = view_path + ".tmp"
            with open(tmp, "w") as out:
                json.dump(
                    {"name": args.name, "alive": sorted({*alive, args.name}), "t": time.time()}, out
                )
            os.replace(tmp, view_path)
        try:
            data, (address, _) = sock.recvfrom(2048)
        except TimeoutError:
            continue
        try:
            message = json.loads(data)
        except ValueError:
            continue  # not ours
        if message.get("bye"):
            heard.pop(address, None)
        else:
            heard[address] = (str(message.get("name")), time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
