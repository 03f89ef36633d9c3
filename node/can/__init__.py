"""The CAN overlay (seed 000 ch. 3; seed 002 ch. 6)."""

from node.can.geometry import Dimension as Dimension
from node.can.geometry import Space as Space
from node.can.overlay import CanConfig as CanConfig
from node.can.overlay import CanOverlay as CanOverlay
from node.can.overlay import Status as Status

__all__ = ["CanConfig", "CanOverlay", "Dimension", "Space", "Status"]
