# testbed/engines/procstats.py: our session's scheduling weight (the emulator's runner
# raises it above the peers' and restores it at the end).

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_session_nice_sets_the_sessions_group_and_returns_the_old_value():
    # In a session of its own, so that the test's session is not touched.
    code = textwrap.dedent(
        """
        from pathlib import Path
        from testbed.engines.procstats import session_nice
        before = session_nice(-7)
        print(before, Path("/proc/self/autogroup").read_text().split()[-1])
        print(session_nice(before), Path("/proc/self/autogroup").read_text().split()[-1])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, start_new_session=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "-7", "-7", "0"]
