# Experiment specs: a TOML file, validated into typed structs, with --set overrides.
#
# Every field is typed and unknown fields are errors naming the field (msgspec
# does the checking; we add the file name and what was expected). --set takes
# dotted paths (topology.hosts=128, phases.0.count=10) and TOML values; a value
# that is not valid TOML is taken as a string.

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from testbed.errors import InputError

__all__ = [
    "DimensionSpec",
    "ExperimentSpec",
    "NodeSpec",
    "PhaseSpec",
    "TopologySpec",
    "apply_overrides",
    "load_spec",
]


class TopologySpec(msgspec.Struct, forbid_unknown_fields=True):
    ref: str = "planetlab"
    hosts: int | None = None
    pick: Literal["first", "random"] = "first"
    scale: float = 1.0
    clamp: bool = False


class DimensionSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A CAN dimension and how peers' capabilities are drawn in it."""

    name: str
    lo: float
    hi: float
    values: list[float] | None = None  # each peer draws one of these
    uniform: tuple[float, float] | None = None  # or a value uniform in [a, b)
    virtual: bool = False  # the random virtual dimension (values drawn uniformly)


def _default_dimensions() -> list[DimensionSpec]:
    # Seed 000 §3.1's units: CPU in 10 MHz, memory in MB, disk in GB; plus cores.
    return [
        DimensionSpec("cpu", 0, 500, values=[200, 240, 280, 320, 360]),
        DimensionSpec("memory", 0, 65536, values=[1024, 2048, 4096, 8192, 16384]),
        DimensionSpec("disk", 0, 2000, values=[80, 160, 250, 500, 1000]),
        DimensionSpec("cores", 0, 64, values=[1, 2, 4, 8]),
        DimensionSpec("virtual", 0, 1, virtual=True),
    ]


class NodeSpec(msgspec.Struct, forbid_unknown_fields=True):
    dimensions: list[DimensionSpec] = msgspec.field(default_factory=_default_dimensions)
    update_interval_s: float = 2.0
    suspect_after_s: float = 6.0
    probe_timeout_s: float = 1.0
    propose_timeout_s: float = 2.0
    join_timeout_s: float = 8.0
    retry_max_s: float = 30.0
    propose_scope: Literal["neighbourhood", "direct"] = "direct"
    grid_key: str | None = None  # hex; every datagram is then authenticated
    port: int = 7000


class PhaseSpec(msgspec.Struct, forbid_unknown_fields=True):
    """One step of membership change, then a quiet period and an invariant check."""

    action: Literal["join", "leave", "crash"]
    count: int | None = None  # how many hosts ...
    fraction: float | None = (
        None  # ... or which share of the current members (of all hosts for join)
    )
    over_s: float = 0.0  # spread the events evenly over this long
    burst: int = 0  # > 0: groups of this many peers whose zones are adjacent (joiners: whose points are close)
    settle_s: float = 60.0  # quiet period before the check
    name: str = ""


class ExperimentSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: str = "experiment"
    engine: Literal["sim", "emu"] = "sim"
    seed: int = 1
    topology: TopologySpec = msgspec.field(default_factory=TopologySpec)
    node: NodeSpec = msgspec.field(default_factory=NodeSpec)
    phases: list[PhaseSpec] = msgspec.field(default_factory=list)
    routes_checked: int = 2000  # greedy routes the oracle follows at each check


def _check(spec: ExperimentSpec, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    if spec.topology.hosts is not None and spec.topology.hosts < 1:
        fail("topology.hosts", f"must be at least 1, not {spec.topology.hosts}")
    if not (math.isfinite(spec.topology.scale) and spec.topology.scale > 0):
        fail("topology.scale", "must be a positive number")
    names = [d.name for d in spec.node.dimensions]
    if not names or len(set(names)) != len(names):
        fail("node.dimensions", f"need distinct names, got {names}")
    if sum(d.virtual for d in spec.node.dimensions) > 1:
        fail("node.dimensions", "at most one virtual dimension")
    for k, d in enumerate(spec.node.dimensions):
        where = f"node.dimensions.{k} ({d.name})"
        if not (math.isfinite(d.lo) and math.isfinite(d.hi) and d.lo < d.hi):
            fail(where, f"need lo < hi, got [{d.lo}, {d.hi})")
        if d.virtual and (d.values or d.uniform):
            fail(where, "a virtual dimension draws its own values; give no values/uniform")
        if not d.virtual and (d.values is None) == (d.uniform is None):
            fail(where, "give exactly one of values = [...] or uniform = [a, b]")
        for v in d.values or []:
            if not d.lo <= v < d.hi:
                fail(where, f"value {v} is outside [{d.lo}, {d.hi})")
        if d.uniform and not (d.lo <= d.uniform[0] < d.uniform[1] <= d.hi):
            fail(where, f"uniform range {list(d.uniform)} must lie within [{d.lo}, {d.hi}]")
    for name in (
        "update_interval_s",
        "suspect_after_s",
        "probe_timeout_s",
        "propose_timeout_s",
        "join_timeout_s",
        "retry_max_s",
    ):
        value = getattr(spec.node, name)
        if not (math.isfinite(value) and value > 0):
            fail(f"node.{name}", "must be a positive number of seconds")
    if spec.node.suspect_after_s <= spec.node.update_interval_s:
        fail(
            "node.suspect_after_s",
            "must exceed node.update_interval_s, or live neighbours get suspected",
        )
    if spec.node.grid_key is not None:
        try:
            key = bytes.fromhex(spec.node.grid_key)
        except ValueError:
            fail("node.grid_key", "must be hex")
        if len(key) < 16:
            fail("node.grid_key", "must be at least 16 bytes (32 hex digits)")
    if not 0 < spec.node.port < 65536:
        fail("node.port", "must be a UDP port number")
    for k, phase in enumerate(spec.phases):
        where = f"phases.{k}"
        if (phase.count is None) == (phase.fraction is None):
            fail(where, "give exactly one of count or fraction")
        if phase.count is not None and phase.count < 0:
            fail(f"{where}.count", "must be >= 0")
        if phase.fraction is not None and not 0 <= phase.fraction <= 1:
            fail(f"{where}.fraction", "must be within 0..1")
        if phase.over_s < 0 or phase.settle_s < 0 or phase.burst < 0:
            fail(where, "over_s, settle_s and burst must be >= 0")


def _convert(data: dict[str, Any], source: str) -> ExperimentSpec:
    try:
        spec = msgspec.convert(data, ExperimentSpec)
    except msgspec.ValidationError as exc:
        raise InputError(f"invalid spec: {exc}", source=source) from None
    _check(spec, source)
    return spec


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply key=value overrides (dotted keys, list indices as numbers) to a copy of data.

    Raises:
        InputError: a malformed override or a path that goes through a non-table.
    """
    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"--set {item!r}: expected key=value, e.g. topology.hosts=128", source="<--set>"
            )
        parts = key.strip().split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise InputError(
                        f"--set {key}: {where} is not an index of a list of {len(node)}",
                        source="<--set>",
                    )
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise InputError(f"--set {key}: {where} is not a table", source="<--set>")
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise InputError(
                    f"--set {key}: {last} is not an index of a list of {len(node)}",
                    source="<--set>",
                )
            node[int(last)] = _parse_value(text)
        elif isinstance(node, dict):
            node[last] = _parse_value(text)
        else:
            raise InputError(f"--set {key}: the parent is not a table", source="<--set>")
    return data


def load_spec(
    path: str | Path | None, overrides: list[str] = (), *, defaults: dict[str, Any] | None = None
) -> tuple[ExperimentSpec, dict[str, Any]]:
    """Read, override and validate a spec. Returns (spec, the effective data as a dict)."""
    source = str(path) if path is not None else "<spec>"
    data: dict[str, Any] = dict(defaults or {})
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError("no such spec file", source=source) from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"not valid TOML: {exc}", source=source) from None
    data = apply_overrides(data, list(overrides))
    spec = _convert(data, source)
    return spec, msgspec.to_builtins(spec)
