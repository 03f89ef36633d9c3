from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.net._probe import IcmpProber, echo_request, icmp_checksum, parse_reply_untrusted


def test_checksum_of_a_known_header():
    # RFC 1071 example words 0001 f203 f4f5 f6f7 sum to ddf2, complement 220d
    assert icmp_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    request = echo_request(ident=3, seq=9, session=77, probe=12345)
    assert icmp_checksum(request) == 0  # a valid packet sums to zero


def reply_of(request: bytes) -> bytes:
    ip_header = bytes([0x45]) + bytes(19)
    body = bytearray(request)
    body[0] = 0  # echo reply
    return ip_header + bytes(body)


def test_parses_only_our_replies():
    request = echo_request(ident=1, seq=2, session=0xDEADBEEF, probe=4242)
    assert parse_reply_untrusted(reply_of(request), 0xDEADBEEF) == 4242
    assert parse_reply_untrusted(reply_of(request), 0x12345678) is None  # another prober
    assert (
        parse_reply_untrusted(bytes([0x45]) + bytes(19) + request, 0xDEADBEEF) is None
    )  # a request
    assert parse_reply_untrusted(reply_of(request)[:30], 0xDEADBEEF) is None


@given(st.binary(max_size=100), st.integers(0, 2**32 - 1))
def test_garbage_is_never_a_reply_by_accident(data, session):
    probe = parse_reply_untrusted(data, session)
    if probe is not None:
        header_len = (data[0] & 0x0F) * 4
        assert struct.unpack_from("!I", data, header_len + 8)[0] == session


def test_a_pair_outside_the_sockets_or_addresses_is_refused_before_anything_is_sent():
    # The compiled loop indexes its arrays unchecked: sources are sockets, destinations
    # addresses (more of them when hosts on other machines have no socket here).
    with IcmpProber([], ["10.0.0.1", "10.0.0.2"]) as prober:
        for pair in [(0, 1), (-1, 0)]:
            with pytest.raises(ValueError, match="source must be one of the 0 sockets"):
                prober.probe([pair], samples=1, rate_per_s=10.0, timeout_s=0.1)
        with pytest.raises(ValueError, match=r"\(0, 2\)"):
            prober.probe([(0, 2)], samples=1, rate_per_s=10.0, timeout_s=0.1)
