"""The deterministic discrete-event simulator: many peer cores in one process, on the same
latency matrix as the emulator."""

from testbed.sim._simulator import Simulator as Simulator

__all__ = ["Simulator"]
