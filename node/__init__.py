"""The grid peer: sans-IO protocol cores (CAN overlay, ...) and their trio runtime.

Protocol code never does I/O; ``node.peer.Peer`` is driven by ``node.runtime``
(real UDP sockets) or by the testbed's simulator (virtual time).
"""
