"""The user-space delay engine: holds forwarded packets on a netfilter queue.

The engine runs as its own process inside the WAN core's namespace
(``python -m testbed.net.delay CONFIG.json``); the testbed talks to it through
:class:`EngineClient`. Only the standard library, msgspec and testbed's pure
modules are imported here, so that the engine process stays small.
"""

from testbed.net.delay._fast import load as compiled_datapath
from testbed.net.delay._native import load_library as load_library
from testbed.net.delay._protocol import EngineClient as EngineClient
from testbed.net.delay._protocol import read_delay_file as read_delay_file
from testbed.net.delay._protocol import write_delay_file as write_delay_file

__all__ = [
    "EngineClient",
    "compiled_datapath",
    "load_library",
    "read_delay_file",
    "write_delay_file",
]
