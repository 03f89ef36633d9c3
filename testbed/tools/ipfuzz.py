# Fuzzing a peer through the emulated WAN, down to the IP layer (docs/can.md, "Hardened
# peers"; issue 25).
#
# Theory of operation
#   A WAN of two hosts: h2 runs a peer (a one-member overlay; no per-source limit, so
#   that every datagram that reaches it reaches its decoder), h1 sends. Each datagram is either a payload of the payload fuzzer (fuzz.py:
#   random, mutated, replayed, oversized...) sent from a UDP socket in h1, or an IP packet
#   crafted with scapy and sent as an Ethernet frame on h1's eth0: a valid-looking message
#   cut into fragments (delivered once reassembled), with a bad UDP checksum, a bad IP
#   checksum, an IP total length beyond the packet, an IP header cut short, a UDP length
#   beyond the packet, a source address that is not h1's, a port nobody listens on; or a
#   flood (a burst of valid-looking messages faster than the peer's per-source limit).
#   Every datagram must be accounted for, wherever it ended: counted by the peer (rx), or
#   dropped by the kernel of the WAN core or of h2 (their SNMP counters: Ip InHdrErrors and
#   InTruncatedPkts, Udp InErrors and NoPorts), by the core's anti-spoofing, or by the
#   delay engine. After each batch the fuzzer waits until the sum has caught up with what
#   was sent; at the end the peer must still answer and have counted every datagram it
#   received as accepted or dropped with a reason.

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from node.wire import Codec, PathEntry, PeerInfo, Update
from testbed.engines.local import LocalPeer
from testbed.engines.peers import build_node_config
from testbed.spec import NodeSpec
from testbed.tools.fuzz import FuzzResult, counters_after, datagrams, fuzz_result

__all__ = ["IP_KINDS", "fuzz_through_wan"]

PORT = 7000
BATCH = 1024
# An IP-layer kind -> (weight, where it ends: "peer" or the counter that counts it).
IP_KINDS: dict[str, tuple[int, str]] = {
    "fragments": (6, "peer"),
    "flood": (4, "peer"),
    "bad_udp_checksum": (4, "h2 Udp InErrors"),
    "bad_udp_length": (3, "h2 Udp InErrors"),
    "wrong_port": (3, "h2 Udp NoPorts"),
    "bad_ip_checksum": (4, "core Ip InHdrErrors"),
    "short_ip_header": (3, "core Ip InHdrErrors"),
    "long_ip_length": (3, "core IpExt InTruncatedPkts"),
    "spoofed": (3, "core anti-spoofing"),
}
IP_SHARE = 0.3  # of the datagrams, crafted at the IP layer (the rest: payloads on a socket)
FLOOD = 64  # datagrams in a flood burst


def _snmp(netns: str) -> Counter[str]:
    """The kernel's drop counters of one namespace (read from inside it)."""
    from testbed.net import entered_netns

    out: Counter[str] = Counter()
    with entered_netns(netns):
        for name in ("snmp", "netstat"):
            lines = Path(f"/proc/thread-self/net/{name}").read_text().splitlines()
            for head, values in zip(lines[::2], lines[1::2], strict=True):
                proto, *keys = head.split()
                for key, value in zip(keys, values.split()[1:], strict=True):
                    out[f"{proto[:-1]} {key}"] = int(value)
    return out


_COUNTED = {  # namespace -> the counters that account for a datagram dropped there
    "core": ("Ip InHdrErrors", "IpExt InTruncatedPkts", "Ip InAddrErrors", "Ip InDiscards"),
    "h2": (
        "Ip InHdrErrors",
        "IpExt InTruncatedPkts",
        "Ip InDiscards",
        "Ip ReasmFails",
        "Udp InErrors",
        "Udp NoPorts",
    ),
}


class _Crafter:
    """IP packets with scapy: one datagram each (fragments: several frames)."""

    def __init__(self, rng: random.Random, src: str, dst: str, src_mac: str, dst_mac: str):
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether

        self.rng = rng
        self.src, self.dst = src, dst
        self.ether = Ether(src=src_mac, dst=dst_mac)
        self.IP, self.UDP = IP, UDP

    def frames(self, kind: str, payload: bytes) -> list[bytes]:
        from scapy.layers.inet import fragment

        rng = self.rng
        sport = rng.randrange(1024, 65535)
        ip = self.IP(src=self.src, dst=self.dst, id=rng.getrandbits(16))
        udp = self.UDP(sport=sport, dport=PORT)
        if kind == "fragments":
            pieces = fragment(ip / udp / payload, fragsize=rng.choice([8, 64, 512]))
            if rng.random() < 0.5:
                rng.shuffle(pieces)  # out of order: the kernel reassembles all the same
            return [bytes(self.ether / piece) for piece in pieces]
        if kind == "wrong_port":
            udp.dport = PORT + 1
        if kind == "spoofed":
            ip.src = f"198.51.100.{rng.randrange(1, 255)}"
        packet = bytearray(bytes(self.ether / ip / udp / payload))
        header = 14  # Ethernet
        if kind == "bad_udp_checksum":
            checksum = int.from_bytes(packet[header + 26 : header + 28], "big")
            packet[header + 26 : header + 28] = ((checksum ^ 0x5A5A) or 1).to_bytes(2, "big")
        elif kind == "bad_udp_length":
            length = len(payload) + 8 + rng.randrange(1, 200)
            packet[header + 24 : header + 26] = min(length, 65535).to_bytes(2, "big")
            packet[header + 26 : header + 28] = bytes(2)  # no checksum: the length is the fault
        elif kind == "bad_ip_checksum":
            checksum = int.from_bytes(packet[header + 10 : header + 12], "big")
            packet[header + 10 : header + 12] = ((checksum ^ 0x0F0F) or 1).to_bytes(2, "big")
        elif kind == "short_ip_header":
            # The header says 60 bytes, the frame holds 20 after Ethernet: cut short.
            packet = packet[: header + 20]
            packet[header] = 0x4F
            packet[header + 2 : header + 4] = (20).to_bytes(2, "big")
            packet[header + 10 : header + 12] = bytes(2)
            packet[header + 10 : header + 12] = _ip_checksum(packet[header : header + 20])
        elif kind == "long_ip_length":
            total = int.from_bytes(packet[header + 2 : header + 4], "big")
            longer = min(65535, total + rng.randrange(1, 1000))
            packet[header + 2 : header + 4] = longer.to_bytes(2, "big")
            packet[header + 10 : header + 12] = bytes(2)
            packet[header + 10 : header + 12] = _ip_checksum(packet[header : header + 20])
        return [bytes(packet)]


def _ip_checksum(header: bytes | bytearray) -> bytes:
    total = sum(int.from_bytes(header[k : k + 2], "big") for k in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF).to_bytes(2, "big")


def _stream(
    seed: int,
    count: int,
    dims: int,
    space: list[tuple[float, float]],
    valid: Callable[[bool], bytes],
) -> Iterator[tuple[str, bytes | None]]:
    """(kind, payload) for every datagram; payload None for IP kinds that build their own."""
    rng = random.Random(f"{seed}/ip")
    payloads = datagrams(seed, count, dims=dims, space=space, key=None)
    kinds = list(IP_KINDS)
    weights = [IP_KINDS[k][0] for k in kinds]
    sent = 0
    while sent < count:
        if rng.random() < IP_SHARE:
            kind = rng.choices(kinds, weights)[0]
            burst = min(FLOOD, count - sent) if kind == "flood" else 1
            for _ in range(burst):
                yield kind, valid(kind == "fragments")
            sent += burst
        else:
            kind, data = next(payloads)
            yield f"udp.{kind}", data
            sent += 1


def fuzz_through_wan(
    folder: Path,
    *,
    count: int,
    seed: int = 1,
    progress: Callable[[int], None] | None = None,
    catch_up_s: float = 10.0,
) -> FuzzResult:
    """Bring up a two-host WAN, fuzz a peer on h2 from h1, tear it all down."""
    from testbed.net import entered_netns, open_wan

    # No per-source limit, as on loopback (fuzz.py): every datagram that reaches the peer
    # must reach its decoder; what the limits do to a flood is measured apart (docs/can.md).
    config = build_node_config(NodeSpec(per_source_per_s=0.0))
    space = [(d.lo, d.hi) for d in config.can.space.dims]
    point = tuple((lo + hi) / 2 for lo, hi in space)
    with open_wan("planetlab", hosts=2, clamp=True, run_dir=folder / "wan", seed=seed) as wan:
        h1, h2 = wan.plan.hosts[0], wan.plan.hosts[1]
        target = (h2.ip, PORT)
        with LocalPeer(
            folder, "target", config, point, join=[], netns=h2.netns, address=target
        ) as peer:
            peer.wait_status("member")
            with entered_netns(h1.netns):
                udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                raw.bind(("eth0", 0))
            rng = random.Random(seed)
            crafter = _Crafter(rng, h1.ip, h2.ip, h1.mac, h1.core_mac)
            stats = lambda: peer.ask("stats")["stats"]  # noqa: E731
            namespaces = {"core": wan.plan.core_netns, "h2": h2.netns}

            def dropped() -> Counter[str]:
                out: Counter[str] = Counter()
                for where, netns in namespaces.items():
                    snmp = _snmp(netns)
                    for key in _COUNTED[where]:
                        out[f"{where} {key}"] = snmp[key]
                out["core anti-spoofing"] = wan.spoofed()
                for reason, n in wan.stats().get("drops", {}).items():
                    out[f"delay engine {reason}"] = n
                return out

            before, kernel0 = stats(), dropped()
            by_kind: Counter[str] = Counter()
            t0 = time.monotonic()
            lost = 0
            valid = _valid_payloads(seed, config)
            try:
                for sent, (kind, data) in enumerate(
                    _stream(seed, count, len(space), space, valid), start=1
                ):
                    if kind.startswith("udp."):
                        udp.sendto(data, target)
                    else:
                        for frame in crafter.frames(kind, data or b""):
                            raw.send(frame)
                    by_kind[kind.split(".")[0] if kind.startswith("udp.") else kind] += 1
                    if sent % BATCH == 0 or sent == count:
                        lost = _catch_up(
                            lambda: (
                                stats().get("rx", 0)
                                - before.get("rx", 0)
                                + sum((dropped() - kernel0).values())
                            ),
                            sent,
                            catch_up_s,
                        )
                        if progress is not None:
                            progress(sent)
            finally:
                udp.close()
                raw.close()
            seconds = time.monotonic() - t0
            after, alive = counters_after(stats, before)
            elsewhere = dict(sorted((k, v) for k, v in (dropped() - kernel0).items() if v))
            result = fuzz_result(before, after, count, by_kind, elsewhere, lost, alive, seconds)
            result["status_after"] = peer.ask("status")["status"] if alive else None
            result["exit_code"] = peer.stop()
    result["alive"] = result["alive"] and result["exit_code"] == 0
    return result


def _valid_payloads(seed: int, config: Any) -> Callable[[bool], bytes]:
    """Well-formed updates from one plausible neighbour (a flood's stuff, a fragment's)."""
    rng = random.Random(f"{seed}/valid")
    codec = Codec(None)
    space = config.can.space
    sender = rng.getrandbits(48) or 1
    seq = 0

    def one(large: bool = False) -> bytes:
        nonlocal seq
        seq += 1
        lo = tuple(d.lo for d in space.dims)
        hi = tuple(d.lo + (d.hi - d.lo) / 2 for d in space.dims)
        point = tuple((a + b) / 2 for a, b in zip(lo, hi, strict=True))
        me = PeerInfo(
            sender, "10.0.0.1", PORT, seq, point, lo, hi, (PathEntry(1, 0, hi[0], False),)
        )
        # One frame's worth, or (to be cut into fragments) up to several frames.
        padding = tuple(me for _ in range(rng.choice([0, 1, 8, 40] if large else [0, 1, 4])))
        return codec.encode(Update(me, padding, ()), sender=sender, seq=seq)

    return one


def _catch_up(accounted: Callable[[], int], target: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while (done := accounted()) < target:
        if time.monotonic() > deadline:
            return target - done
        time.sleep(0.005)
    return 0
