# Shared by the integration tests.

from __future__ import annotations

# A small CAN experiment in the simulator: 40 PlanetLab hosts, fast timers, five phases
# (test_can_sim runs it; the churn and cluster tests keep its settings without the phases).
SMALL = {
    "name": "small",
    "seed": 3,
    "routes_checked": 300,
    "topology": {"ref": "planetlab", "hosts": 40, "pick": "random"},
    "node": {
        "update_interval_s": 1.0,
        "suspect_after_s": 3.0,
        "probe_timeout_s": 0.5,
        "propose_timeout_s": 1.0,
        "join_timeout_s": 4.0,
        "retry_max_s": 8.0,
    },
    "phases": [
        {"name": "build", "action": "join", "count": 32, "over_s": 16, "settle_s": 40},
        {"name": "crash", "action": "crash", "count": 4, "over_s": 4, "settle_s": 20},
        {"name": "burst", "action": "crash", "count": 4, "burst": 4, "settle_s": 25},
        {"name": "leave", "action": "leave", "count": 4, "burst": 2, "over_s": 2, "settle_s": 20},
        {"name": "rejoin", "action": "join", "count": 8, "over_s": 4, "settle_s": 30},
    ],
}
