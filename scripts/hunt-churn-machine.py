"""Random searches of the CAN churn state machine (docs/can.md, Known limits).

The suite runs a fixed set of examples (derandomized, so that CI is no lottery); this runs
fresh random searches of 300 examples each until the budget is spent, and prints each
failure with the steps Hypothesis shrank it to:

    .venv/bin/python scripts/hunt-churn-machine.py --budget-s 900
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.test_can_sim import ChurnMachine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget")
    parser.add_argument("--examples", type=int, default=300, help="examples per search")
    args = parser.parse_args()
    if args.budget_s <= 0 or args.examples < 1:
        parser.error("--budget-s must be > 0 and --examples >= 1")
    t0 = time.monotonic()
    searches = failures = 0
    while time.monotonic() - t0 < args.budget_s:
        searches += 1
        t1 = time.monotonic()
        try:
            run_state_machine_as_test(
                ChurnMachine,
                settings=settings(
                    max_examples=args.examples,
                    stateful_step_count=20,
                    deadline=None,
                    database=None,
                    derandomize=False,
                    print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow],
                ),
            )
            print(f"search {searches}: passed in {time.monotonic() - t1:.0f} s", flush=True)
        except Exception as exc:  # a failing example: print it and go on
            failures += 1
            print(f"search {searches}: FAILED after {time.monotonic() - t1:.0f} s: {exc!r}")
            traceback.print_exc()
            sys.stdout.flush()
    print(f"{searches} searches, {failures} failed, in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
