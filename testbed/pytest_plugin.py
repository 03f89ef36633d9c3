"""pytest fixtures that bring up an emulated WAN for a test.

Installed with the testbed (entry point ``pytest11``), so any project's tests
can use them::

    import pytest

    @pytest.mark.wan("planetlab", hosts=8)
    def test_my_protocol(wan):
        peers = [wan.popen(h, "python my_peer.py --ip {ip} --peers {peers}") for h in wan.hosts]
        result = wan.exec("python my_client.py --ip {ip}", hosts=["h1"], timeout_s=30)
        assert result[0].returncode == 0

    def test_two_networks(wan_factory):
        small = wan_factory("planetlab:2", hosts=4)
        ...

``wan`` takes the arguments of :func:`testbed.net.open_wan` from the ``wan``
mark (default: ``planetlab``, 8 hosts, clamp=True). Every network is torn down
after the test, also when it fails. Runs go under the test's ``tmp_path``;
``--testbed-runs DIR`` keeps them in DIR instead.

When a test that used them fails, its report gets a section per network: the
run folder, and every program on its hosts that exited with an error or was
still running, with the tail of its output (Wan.failure_report).

Namespaces need root: without it the tests are skipped with a reason, unless
the environment sets ``TESTBED_REQUIRE_NETNS=1``, which turns that skip into a
failure (CI sets it, so that a test suite cannot pass by skipping).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["require_netns"]

DEFAULT_WAN = {"topology": "planetlab", "hosts": 8, "clamp": True}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testbed", "P2P Grid Testbed")
    group.addoption(
        "--testbed-runs",
        metavar="DIR",
        default=None,
        help="Keep the run folders of `wan` fixtures in DIR.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "wan(topology, **open_wan_kwargs): configure the `wan` fixture's network"
    )


def require_netns() -> None:
    """Skip (or fail under TESTBED_REQUIRE_NETNS=1) unless namespaces can be made here."""
    problem = None
    if os.geteuid() != 0:
        problem = "needs root to create network namespaces"
    elif not Path("/proc/self/ns/net").exists():
        problem = "this kernel has no network namespaces"
    if problem is None:
        return
    if os.environ.get("TESTBED_REQUIRE_NETNS") == "1":
        pytest.fail(f"{problem} (TESTBED_REQUIRE_NETNS=1 forbids skipping)", pytrace=False)
    pytest.skip(problem)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that opened networks: their run folders and failed programs."""
    outcome = yield
    report = outcome.get_result()
    wans = getattr(item, "_testbed_wans", None)
    if not wans or not report.failed or report.when == "teardown":
        return
    for k, wan in enumerate(wans):
        try:
            text = wan.failure_report() or f"run folder: {wan.run_dir}"
        except Exception as exc:  # the report must never hide the failure itself
            text = f"run folder: {wan.run_dir} (no process report: {exc})"
        report.sections.append((f"testbed network {k + 1}", text))


@pytest.fixture
def wan_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """A function that opens WANs (same arguments as open_wan); all are closed after the test."""
    require_netns()
    from testbed.net import open_wan

    opened: list[Any] = []
    request.node._testbed_wans = opened  # for the failure report (pytest_runtest_makereport)
    runs_option = request.config.getoption("--testbed-runs")

    def factory(topology: Any = "planetlab", **kwargs: Any) -> Any:
        if "run_dir" not in kwargs:
            base = Path(runs_option) if runs_option else tmp_path
            kwargs["run_dir"] = base / f"{request.node.name}-{len(opened)}"
        wan = open_wan(topology, **kwargs)
        opened.append(wan)
        return wan

    try:
        yield factory
    finally:
        errors = []
        for wan in reversed(opened):
            try:
                wan.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def wan(request: pytest.FixtureRequest, wan_factory: Callable[..., Any]) -> Any:
    """An emulated WAN configured by the test's `wan` mark (see the module docstring)."""
    marker = request.node.get_closest_marker("wan")
    kwargs = dict(DEFAULT_WAN)
    if marker is not None:
        if marker.args:
            kwargs["topology"] = marker.args[0]
        kwargs.update(marker.kwargs)
    topology = kwargs.pop("topology")
    return wan_factory(topology, **kwargs)
