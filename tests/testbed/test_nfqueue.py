from __future__ import annotations

import ipaddress
import socket
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.net.delay import _nfqueue as nfq


def ipv4_header(src: str, dst: str, total_length: int = 84) -> bytes:
    return struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total_length,
        1,
        0,
        64,
        1,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )


def packet_message(
    packet_id=7, stamp=(1_700_000_000, 250_000), payload=None, cap_len=None
) -> bytes:
    attrs = nfq._attr(nfq.NFQA_PACKET_HDR, struct.pack(">IHB", packet_id, 0x0800, 2))
    if stamp is not None:
        attrs += nfq._attr(nfq.NFQA_TIMESTAMP, struct.pack(">QQ", *stamp))
    attrs += nfq._attr(
        nfq.NFQA_PAYLOAD, payload if payload is not None else ipv4_header("10.0.0.1", "10.0.0.2")
    )
    if cap_len is not None:
        attrs += nfq._attr(nfq.NFQA_CAP_LEN, struct.pack(">I", cap_len))
    return nfq._message(nfq.NFQNL_MSG_PACKET, 0, attrs, 0)


def as_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def test_parses_a_packet_message():
    data = packet_message()
    parsed = nfq.parse_packet_untrusted(data, len(data))
    assert parsed == (7, 1_700_000_000.25, as_int("10.0.0.1"), as_int("10.0.0.2"), 84)


def test_cap_len_wins_over_the_header_length_and_stamp_may_be_missing():
    data = packet_message(stamp=None, cap_len=60_000)
    packet_id, stamp, _src, _dst, size = nfq.parse_packet_untrusted(data, len(data))
    assert (packet_id, stamp, size) == (7, 0.0, 60_000)


def test_rejects_what_is_not_an_ipv4_packet_message():
    good = packet_message()
    for cut in range(len(good)):
        assert nfq.parse_packet_untrusted(good[:cut], cut) is None or cut >= len(good)
    ipv6 = packet_message(payload=b"\x60" + bytes(39))
    assert nfq.parse_packet_untrusted(ipv6, len(ipv6)) is None
    no_id = nfq._message(
        nfq.NFQNL_MSG_PACKET, 0, nfq._attr(nfq.NFQA_PAYLOAD, ipv4_header("10.0.0.1", "10.0.0.2")), 0
    )
    assert nfq.parse_packet_untrusted(no_id, len(no_id)) is None
    verdict = nfq.verdict_message(0, 1, nfq.NF_ACCEPT)
    assert nfq.parse_packet_untrusted(verdict, len(verdict)) is None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_raises(data):
    result = nfq.parse_packet_untrusted(data, len(data))
    assert result is None or len(result) == 5


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_messages_never_raise(data):
    message = bytearray(packet_message(cap_len=1500))
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(message) - 1))
        message[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(message)))
    nfq.parse_packet_untrusted(bytes(message[:cut]), cut)


def test_verdict_message_layout():
    message = nfq.verdict_message(3, 0xABCDEF, nfq.NF_DROP)
    assert len(message) == 32
    length, kind, flags, _seq, _pid = struct.unpack_from("=IHHII", message)
    assert length == 32
    assert kind == (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_VERDICT
    assert flags == nfq.NLM_F_REQUEST
    assert struct.unpack_from("!H", message, 18)[0] == 3  # queue number, big-endian res_id
    assert message[:24] == nfq.verdict_prefix(3)
    assert struct.unpack_from(">II", message, 24) == (nfq.NF_DROP, 0xABCDEF)
