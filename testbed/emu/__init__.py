"""The emulator: hosts in network namespaces on a WAN core that delays every
packet by its pair's latency.

Public API::

    with open_wan("planetlab", hosts=32) as wan:
        wan.exec("ping -c3 {peers}")          # on every host, logs in the run folder
        wan.partition(["h1", "h2"], ["h3"])   # runtime control
        wan.heal()
        wan.cli()                             # Mininet's CLI

Names are imported lazily, so that ``python -m testbed.emu.engine`` (the delay
engine process) does not load Mininet, pyroute2 or numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Calibration",
    "EmuHost",
    "EngineClient",
    "ExecResult",
    "HostProcess",
    "Wan",
    "clean",
    "open_wan",
]

if TYPE_CHECKING:
    from testbed.emu._clean import clean as clean
    from testbed.emu._wan import Calibration as Calibration
    from testbed.emu._wan import EmuHost as EmuHost
    from testbed.emu._wan import ExecResult as ExecResult
    from testbed.emu._wan import HostProcess as HostProcess
    from testbed.emu._wan import Wan as Wan
    from testbed.emu._wan import open_wan as open_wan
    from testbed.emu.engine import EngineClient as EngineClient

_LAZY = {
    "Calibration": "testbed.emu._wan",
    "EmuHost": "testbed.emu._wan",
    "ExecResult": "testbed.emu._wan",
    "HostProcess": "testbed.emu._wan",
    "Wan": "testbed.emu._wan",
    "open_wan": "testbed.emu._wan",
    "clean": "testbed.emu._clean",
    "EngineClient": "testbed.emu.engine",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'testbed.emu' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
