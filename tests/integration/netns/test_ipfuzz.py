# The fuzz through the emulated WAN, down to the IP layer (testbed/tools/ipfuzz.py): every
# datagram is accounted for, wherever it ended, and the peer survives.

from __future__ import annotations

import json
from collections import Counter

from testbed.tools.ipfuzz import IP_KINDS, fuzz_through_wan


def test_every_datagram_through_the_wan_is_accounted_for(tmp_path):
    result = fuzz_through_wan(tmp_path, count=6000, seed=3)
    assert result.ok and result["crashes"] == 0, json.dumps(result)
    assert result["counted"] == result["sent"] == 6000 and result["uncounted"] == 0
    # Every IP-layer kind was sent, and each ended where it should: the valid-looking
    # ones (fragments, floods) at the peer, the others in a kernel counter or the WAN's.
    assert set(IP_KINDS) <= set(result["by_kind"])
    expected = Counter()
    for kind, (_, where) in IP_KINDS.items():
        if where != "peer":
            expected[where] += result["by_kind"][kind]
    elsewhere = result["dropped_elsewhere"]
    assert all(elsewhere.get(where, 0) >= n for where, n in expected.items()), elsewhere
    assert result["rx_delta"] == result["accepted"] + sum(result["dropped"].values())
    # It still answers (fuzzed Evicted or Dissolve messages may have sent it rejoining:
    # an unkeyed grid trusts whoever reaches it, docs/can.md) and exits cleanly.
    assert result["status_after"] is not None and result["exit_code"] == 0
