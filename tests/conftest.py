# Test layout: tests/unit needs nothing special; tests/netns builds real
# namespaces (root) and is marked `netns`. After the whole session we check
# that no namespace, registry record or process of ours is left on the
# machine, and remove any we find, so a failing test cannot poison the next run.

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
    yield
    import os

    if os.geteuid() != 0:
        return
    from testbed.emu._clean import clean, netns_of_run

    left = netns_of_run()
    report = clean(force=True)
    assert not left, f"namespaces left behind by the tests (now removed): {left}; report {report}"
