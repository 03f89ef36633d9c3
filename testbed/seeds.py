# The seeds of a run's random generators, derived in one place.
#
# Rule: a peer's random draws depend only on (run seed, host, incarnation), never on the
# engine or on the order in which peers start, so the simulator and the emulator give a host's
# peer the same generator, and adding a host does not change the others' draws (STYLE.md §3).

from __future__ import annotations

import hashlib

__all__ = ["peer_seed"]


def peer_seed(seed: int, host: int, incarnation: int) -> int:
    """The seed of the random generator of `host`'s `incarnation`-th peer (1 for its first) in
    a run of `seed`.

    It is the integer `random.Random` derives from the string "{seed}/peer/{host}/{incarnation}"
    (version 2 seeding: the bytes followed by their SHA-512), so `Random(peer_seed(...))` draws
    what the simulator has drawn since its first version, and the seed can cross a command line
    to a peer process (`python -m node --seed`).
    """
    text = f"{seed}/peer/{host}/{incarnation}".encode()
    return int.from_bytes(text + hashlib.sha512(text).digest(), "big")
