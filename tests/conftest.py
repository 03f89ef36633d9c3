# Test layout: tests/unit needs nothing special; tests/netns builds real
# namespaces (root) and is marked `netns`. After the whole session we check
# that no namespace, registry record or process of the runs this session made
# is left on the machine, and remove any we find, so a failing test cannot
# poison the next run (runs of other processes are left alone).

from __future__ import annotations

import pytest

from testbed.pytest_plugin import require_netns


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/netns/" in str(item.path):
            item.add_marker(pytest.mark.netns)


@pytest.fixture(autouse=True)
def _netns_guard(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("netns") is not None:
        require_netns()


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_behind() -> object:
    # Only runs made by this session are ours to judge and remove: a user's
    # live run on the same machine (an experiment in another shell) is not.
    import os

    if os.geteuid() != 0:
        yield
        return
    from testbed.net._clean import clean, netns_of_run
    from testbed.net._registry import list_runs

    before = set(netns_of_run())
    yield
    runs = list_runs()
    ours = {r.run_id for r in runs if r.owner_pid == os.getpid()}
    # Namespaces that appeared meanwhile are ours unless a live process of
    # someone else registered them (a run started beside the tests).
    others = {r.run_id for r in runs if r.owner_pid != os.getpid() and r.owner_alive()}
    ours |= set(netns_of_run()) - before - others
    reports = [clean(force=True, run_id=rid) for rid in sorted(ours)]
    assert not ours, f"runs left behind by the tests (now removed): {sorted(ours)}; {reports}"
