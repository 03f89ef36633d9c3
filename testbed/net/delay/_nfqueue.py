# The netfilter queue protocol (nfnetlink_queue), spoken directly over a
# netlink socket.
#
# Why not libnetfilter_queue or the NetfilterQueue package: the delay engine
# holds thousands of packets and gives their verdicts out of order, later,
# batched into one send; it needs the kernel's arrival timestamp and the
# captured length; and it must stay a plain Python process with no C build
# step. The protocol is small (include/uapi/linux/netfilter/nfnetlink_queue.h):
#   * config messages bind the socket to a queue number and set copy mode,
#     queue length and flags;
#   * the kernel sends one NFQNL_MSG_PACKET per queued packet, with attributes
#     NFQA_PACKET_HDR (id), NFQA_TIMESTAMP, NFQA_PAYLOAD (the first copy_range
#     bytes of the IP packet), NFQA_CAP_LEN (the full length when truncated);
#   * we answer with NFQNL_MSG_VERDICT (id, ACCEPT or DROP), at any time and in
#     any order. Several verdicts can share one send.
#
# Everything here is pure except NfQueue, which owns the socket.

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Self

__all__ = [
    "NF_ACCEPT",
    "NF_DROP",
    "NfQueue",
    "NfQueueError",
    "parse_packet_untrusted",
    "verdict_message",
]

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2

NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_TIMESTAMP = 4
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_GSO = 1 << 2  # hand GSO packets over whole, do not segment them first

NF_DROP = 0
NF_ACCEPT = 1

NLA_TYPE_MASK = 0x3FFF  # strip NLA_F_NESTED / NLA_F_NET_BYTEORDER

_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("=BBH")  # family, version, res_id (big-endian, packed by hand)
_NLA = struct.Struct("=HH")
_U32_BE = struct.Struct(">I")
_PACKET_HDR = struct.Struct(">IHB")  # packet_id, hw_protocol, hook
_TIMESTAMP = struct.Struct(">QQ")  # sec, usec
_VERDICT = struct.Struct(">II")  # verdict, packet_id
_IPV4_ADDRS = struct.Struct(">II")  # saddr, daddr at offset 12 of the IPv4 header
_U16_BE = struct.Struct(">H")

# Bytes of each packet copied to user space: the IPv4 header is all we read.
COPY_RANGE_BYTES = 64


class NfQueueError(OSError):
    """The kernel refused a queue configuration (errno in .errno)."""


def _attr(kind: int, payload: bytes) -> bytes:
    length = _NLA.size + len(payload)
    return _NLA.pack(length, kind) + payload + b"\0" * (-length % 4)


def _message(msg_type: int, queue: int, attrs: bytes, flags: int, seq: int = 0) -> bytes:
    body = _NFGENMSG.pack(socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return (
        _NLMSGHDR.pack(
            _NLMSGHDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, 0
        )
        + body
    )


def _config_command(queue: int, seq: int, command: int) -> bytes:
    payload = struct.pack(">BxH", command, 0)
    return _message(
        NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_CMD, payload), NLM_F_REQUEST | NLM_F_ACK, seq
    )


def bind_message(queue: int, seq: int) -> bytes:
    return _config_command(queue, seq, NFQNL_CFG_CMD_BIND)


def unbind_message(queue: int, seq: int) -> bytes:
    return _config_command(queue, seq, NFQNL_CFG_CMD_UNBIND)


def params_message(queue: int, seq: int, *, max_queued: int, gso: bool = True) -> bytes:
    attrs = _attr(NFQA_CFG_PARAMS, struct.pack(">IB", COPY_RANGE_BYTES, NFQNL_COPY_PACKET))
    attrs += _attr(NFQA_CFG_QUEUE_MAXLEN, _U32_BE.pack(max_queued))
    if gso:
        attrs += _attr(NFQA_CFG_FLAGS, _U32_BE.pack(NFQA_CFG_F_GSO))
        attrs += _attr(NFQA_CFG_MASK, _U32_BE.pack(NFQA_CFG_F_GSO))
    return _message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, seq)


def verdict_prefix(queue: int) -> bytes:
    """The constant first 24 bytes of every verdict message for `queue`."""
    length = _NLMSGHDR.size + _NFGENMSG.size + _NLA.size + _VERDICT.size
    return (
        _NLMSGHDR.pack(length, (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT, NLM_F_REQUEST, 0, 0)
        + _NFGENMSG.pack(socket.AF_UNSPEC, 0, socket.htons(queue))
        + _NLA.pack(_NLA.size + _VERDICT.size, NFQA_VERDICT_HDR)
    )


def verdict_message(queue: int, packet_id: int, verdict: int) -> bytes:
    return verdict_prefix(queue) + _VERDICT.pack(verdict, packet_id)


def parse_packet_untrusted(
    buf: bytes | bytearray | memoryview, length: int
) -> tuple[int, float, int, int, int] | None:
    """Decode one NFQNL_MSG_PACKET.

    Returns:
        (packet_id, kernel_timestamp_s or 0.0, saddr, daddr, packet_length_bytes),
        addresses as 32-bit integers; or None when `buf` holds no well-formed IPv4
        packet message (then the caller accepts nothing and drops nothing: a
        message without an id cannot be answered). Raises nothing.
    """
    if length < _NLMSGHDR.size + _NFGENMSG.size:
        return None
    msg_len, msg_type, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, 0)
    if msg_type != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET or msg_len > length:
        return None
    offset = _NLMSGHDR.size + _NFGENMSG.size
    packet_id = -1
    stamp = 0.0
    saddr = daddr = 0
    size = 0
    cap_len = 0
    while offset + _NLA.size <= msg_len:
        attr_len, attr_type = _NLA.unpack_from(buf, offset)
        if attr_len < _NLA.size or offset + attr_len > msg_len:
            return None
        attr_type &= NLA_TYPE_MASK
        value = offset + _NLA.size
        if attr_type == NFQA_PACKET_HDR and attr_len >= _NLA.size + 4:
            packet_id = _U32_BE.unpack_from(buf, value)[0]
        elif attr_type == NFQA_TIMESTAMP and attr_len >= _NLA.size + _TIMESTAMP.size:
            sec, usec = _TIMESTAMP.unpack_from(buf, value)
            stamp = sec + usec * 1e-6
        elif attr_type == NFQA_PAYLOAD and attr_len >= _NLA.size + 20:
            if buf[value] >> 4 != 4:
                return None
            size = _U16_BE.unpack_from(buf, value + 2)[0]
            saddr, daddr = _IPV4_ADDRS.unpack_from(buf, value + 12)
        elif attr_type == NFQA_CAP_LEN and attr_len >= _NLA.size + 4:
            cap_len = _U32_BE.unpack_from(buf, value)[0]
        offset += (attr_len + 3) & ~3
    if packet_id < 0 or saddr == 0:
        return None
    return packet_id, stamp, saddr, daddr, cap_len or size


class NfQueue:
    """A netlink socket bound to one netfilter queue, in the caller's namespace.

    Use as a context manager; leaving it unbinds and closes the socket (the
    kernel then drops whatever is still queued for us: no rule left behind
    can leak packets undelayed).
    """

    def __init__(self, queue: int, *, max_queued: int, rcvbuf_bytes: int = 32 << 20) -> None:
        self.queue = queue
        self._seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.bind((0, 0))
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf_bytes)
            except PermissionError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
            # Overflow shows in the kernel's per-queue counters; do not make recv fail.
            self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self._request(bind_message(queue, self._next_seq()), "bind")
            self._request(
                params_message(queue, self._next_seq(), max_queued=max_queued), "configure"
            )
        except BaseException:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.prefix = verdict_prefix(queue)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _request(self, message: bytes, what: str) -> None:
        seq = _NLMSGHDR.unpack_from(message, 0)[3]
        self.sock.send(message)
        while True:
            data = self.sock.recv(65536)
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                msg_len, msg_type, _flags, msg_seq, _pid = _NLMSGHDR.unpack_from(data, offset)
                if msg_type == NLMSG_ERROR and msg_seq == seq:
                    code = -struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0]
                    if code:
                        raise NfQueueError(
                            code, f"nfqueue {what} (queue {self.queue}): {os.strerror(code)}"
                        )
                    return
                offset += max((msg_len + 3) & ~3, _NLMSGHDR.size)

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_into(self, buf: bytearray) -> int:
        """Read one message; returns its length, or 0 when nothing is waiting."""
        try:
            return self.sock.recv_into(buf)
        except BlockingIOError:
            return 0
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:  # kernel dropped messages; its counters say how many
                return 0
            raise

    def send_verdicts(self, messages: bytes) -> None:
        """Send one or more concatenated verdict messages."""
        while True:
            try:
                self.sock.send(messages)
                return
            except BlockingIOError:
                continue
            except InterruptedError:
                continue

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            try:
                self.sock.setblocking(True)
                self.sock.settimeout(1.0)
                self._request(unbind_message(self.queue, self._next_seq()), "unbind")
            except OSError:
                pass
            self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
