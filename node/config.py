# A peer's configuration as a JSON document, so that the testbed can hand the
# very NodeConfig it uses in the simulator to a real peer process.
#
#   {"grid_key": "<hex>" | null,
#    "can": {"space": [{"name": "cpu", "lo": 0, "hi": 500, "virtual": false}, ...],
#            "update_interval_s": 2.0, ...any other CanConfig field},
#    "probe": {"samples": 5, ...any ProbeConfig field},      (optional)
#    "cluster": {"diameter_ms": 0.2, ...any ClusterConfig field},  (optional)
#    "sched": {"beat_s": 2.0, ...any SchedConfig field}}  (optional)
#
# Unknown fields are errors (a typo must not silently fall back to a default).

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.cluster.agent import ClusterConfig
from node.coord.probe import ProbeConfig
from node.peer import NodeConfig
from node.sched.agent import SchedConfig

__all__ = ["ConfigError", "config_from_dict", "config_to_dict", "load_config"]


class ConfigError(ValueError):
    """A node configuration document is malformed; the message names the field."""


_CAN_FIELDS = {f.name for f in dataclasses.fields(CanConfig)} - {"space"}
_PROBE_FIELDS = {f.name for f in dataclasses.fields(ProbeConfig)}
_CLUSTER_FIELDS = {f.name for f in dataclasses.fields(ClusterConfig)}
_SCHED_FIELDS = {f.name for f in dataclasses.fields(SchedConfig)}


def config_to_dict(config: NodeConfig) -> dict[str, Any]:
    can = {name: getattr(config.can, name) for name in sorted(_CAN_FIELDS)}
    can["space"] = [dataclasses.asdict(d) for d in config.can.space.dims]
    return {
        "grid_key": config.grid_key.hex() if config.grid_key else None,
        "can": can,
        "probe": dataclasses.asdict(config.probe),
        "cluster": dataclasses.asdict(config.cluster) if config.cluster else None,
        "sched": dataclasses.asdict(config.sched) if config.sched else None,
    }


def config_from_dict(data: Any, *, source: str = "config") -> NodeConfig:
    def fail(field: str, reason: str) -> ConfigError:
        return ConfigError(f"{source}: {field}: {reason}")

    if not isinstance(data, dict):
        raise fail("(top)", "expected a JSON object")
    unknown = set(data) - {"grid_key", "can", "probe", "cluster", "sched"}
    if unknown:
        raise fail(
            ", ".join(sorted(unknown)),
            "unknown field (expected grid_key, can, probe, cluster, sched)",
        )
    can = data.get("can")
    if not isinstance(can, dict):
        raise fail("can", "expected an object with at least 'space'")
    unknown = set(can) - _CAN_FIELDS - {"space"}
    if unknown:
        raise fail(f"can.{sorted(unknown)[0]}", "unknown field")
    space = can.get("space")
    if not isinstance(space, list) or not space:
        raise fail("can.space", "expected a non-empty list of dimensions")
    try:
        dims = [Dimension(**d) for d in space]
    except (TypeError, ValueError) as exc:
        raise fail("can.space", str(exc)) from None
    try:
        can_config = CanConfig(Space(dims), **{k: v for k, v in can.items() if k != "space"})
    except (TypeError, ValueError) as exc:
        raise fail("can", str(exc)) from None
    key = data.get("grid_key")
    if key is not None:
        try:
            key = bytes.fromhex(key)
        except (TypeError, ValueError):
            raise fail("grid_key", "expected a hex string") from None
    probe_config = _section(data, "probe", ProbeConfig, _PROBE_FIELDS, fail, default={})
    cluster_config = _section(data, "cluster", ClusterConfig, _CLUSTER_FIELDS, fail, default=None)
    sched_config = _section(data, "sched", SchedConfig, _SCHED_FIELDS, fail, default=None)
    return NodeConfig(can_config, key, probe_config, cluster_config, sched_config)


def _section(
    data: dict[str, Any],
    name: str,
    cls: Any,
    fields: set[str],
    fail: Callable[[str, str], ConfigError],
    *,
    default: dict[str, Any] | None,
) -> Any:
    """An optional table of the document as a `cls`; None if absent and no default."""
    section = data.get(name, default)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise fail(name, "expected an object")
    unknown = set(section) - fields
    if unknown:
        raise fail(f"{name}.{sorted(unknown)[0]}", "unknown field")
    try:
        return cls(**section)
    except (TypeError, ValueError) as exc:
        raise fail(name, str(exc)) from None


def load_config(path: str | Path) -> NodeConfig:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    return config_from_dict(data, source=str(path))
