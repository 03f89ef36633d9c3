"""The check of the gossip example: every host that should be up believes
exactly the hosts that should be up are alive.

    python3 check.py {run}/views {members}

Exit 0 when all agree; 1 with the disagreements on stderr.
"""

import json
import os
import sys
import time

STALE_S = 2.0


def main() -> int:
    views, members = sys.argv[1], set(filter(None, sys.argv[2].split(",")))
    wrong = []
    for name in sorted(members):
        path = os.path.join(views, f"{name}.json")
        try:
            with open(path) as stream:
                view = json.load(stream)
        except (OSError, ValueError) as exc:
            wrong.append(f"{name}: no view ({exc.__class__.__name__})")
            continue
        if time.time() - view["t"] > STALE_S:
            wrong.append(f"{name}: its view is {time.time() - view['t']:.1f} s old")
        alive = set(view["alive"])
        if alive != members:
            missing, extra = sorted(members - alive), sorted(alive - members)
            wrong.append(f"{name}: misses {missing}, believes dead ones alive {extra}")
    for line in wrong:
        print(line, file=sys.stderr)
    print(f"{len(members) - len(wrong)} of {len(members)} views right")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
