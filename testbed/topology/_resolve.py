# Turning what a user types (a name, a file, a spec) into a Topology.
#
# References:
#   planetlab            PlanetLab frame 1 (topologies/planetlab/)
#   planetlab:<t>        PlanetLab frame t, 1..18
#   sharcnet[:<seed>]    the default SHARCNET-style grid (2,091 nodes), seed 1 by default
#   <file>.toml          a topology spec (a matrix file or a generator, plus scale)
#   <any other path>     a matrix file (see read_matrix)
#
# In a spec, `{seed}` in a reference stands for the run's seed (one map per seed);
# resolve_topology is the one place that reads a spec's [topology] table.

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from pathlib import Path

import msgspec

from testbed.errors import TopologyError
from testbed.spec import TopologySpec
from testbed.topology._matrix import LinkSetting, Topology, read_matrix
from testbed.topology._sharcnet import DEFAULT_CLUSTERS, GIGE, MYRINET, IntraLatency, sharcnet_grid

__all__ = ["TOPOLOGY_DIR", "load_topology", "planetlab_frame", "resolve_topology"]

# The repository's data folder; TESTBED_TOPOLOGIES overrides it.
TOPOLOGY_DIR = Path(
    os.environ.get("TESTBED_TOPOLOGIES", Path(__file__).resolve().parents[2] / "topologies")
)

PLANETLAB_FRAMES = range(1, 19)


def planetlab_frame(frame: int = 1) -> Topology:
    """Return PlanetLab frame `frame` (1..18): 490 nodes named n0..n489."""
    if frame not in PLANETLAB_FRAMES:
        raise TopologyError(f"PlanetLab frames are 1..18, not {frame!r}", source="<topology>")
    path = TOPOLOGY_DIR / "planetlab" / f"PlanetLabData_{frame}.gz"
    topology = read_matrix(path)
    return Topology(topology.rtt_ms, topology.names, (), f"planetlab:{frame}")


class _Intra(msgspec.Struct, forbid_unknown_fields=True):
    dist: str = "uniform"
    low_ms: float | None = None
    high_ms: float | None = None
    mean_ms: float | None = None
    sd_ms: float | None = None
    value_ms: float | None = None


class _Sharcnet(msgspec.Struct, forbid_unknown_fields=True):
    seed: int = 1
    clusters: list[int] = msgspec.field(default_factory=lambda: list(DEFAULT_CLUSTERS))
    gige: list[int] | None = None
    inter: str = "planetlab:1"
    myrinet_latency: _Intra | None = None
    gige_latency: _Intra | None = None


class _Access(msgspec.Struct, forbid_unknown_fields=True):
    hosts: str | list[str]
    up_mbit: float | None = None
    down_mbit: float | None = None
    queue_bytes: int = 0
    queue_packets: int = 0


class _Bandwidth(msgspec.Struct, forbid_unknown_fields=True):
    src: str | list[str]
    dst: str | list[str]
    rate_mbit: float
    queue_bytes: int = 0
    queue_packets: int = 0


class _TopologySpec(msgspec.Struct, forbid_unknown_fields=True):
    matrix: str | None = None
    names: list[str] | None = None
    scale: float = 1.0
    sharcnet: _Sharcnet | None = None
    access: list[_Access] = []
    bandwidth: list[_Bandwidth] = []


def _links(spec: _TopologySpec, topology: Topology, source: str) -> tuple[LinkSetting, ...]:
    """The spec's [[access]] and [[bandwidth]] tables, checked against the topology."""
    out = []
    for table, entries in (("access", spec.access), ("bandwidth", spec.bandwidth)):
        for k, entry in enumerate(entries, start=1):
            where = f"[[{table}]] #{k}"

            def fail(field: str, why: str, where: str = where) -> TopologyError:
                return TopologyError(f"{where}: {field}: {why}", source=source)

            selectors = (
                {"hosts": entry.hosts}
                if table == "access"
                else {"src": entry.src, "dst": entry.dst}
            )  # type: ignore[union-attr]
            chosen: dict[str, str | tuple[str, ...]] = {}
            for field, value in selectors.items():
                selector = value if isinstance(value, str) else tuple(value)
                if isinstance(selector, str) and selector != "all" and "=" not in selector:
                    raise fail(
                        field,
                        f'{selector!r}: expected "all", a label "key=value" or a list of node names',
                    )
                if isinstance(selector, tuple):
                    unknown = [n for n in selector if n not in topology.names]
                    if unknown or not selector:
                        raise fail(field, f"no such node(s): {unknown[:5] or 'an empty list'}")
                probe = LinkSetting(kind=table)
                if not any(
                    probe.matches(selector, n, lab)
                    for n, lab in zip(
                        topology.names, topology.labels or [{}] * topology.n, strict=True
                    )
                ):
                    raise fail(field, f"{selector!r} matches no node of the topology")
                chosen[field] = selector
            rates = (
                {"up_mbit": entry.up_mbit, "down_mbit": entry.down_mbit}
                if table == "access"
                else {"rate_mbit": entry.rate_mbit}
            )  # type: ignore[union-attr]
            for field, rate in rates.items():
                if rate is not None and not (math.isfinite(rate) and 0.001 <= rate <= 100_000):
                    raise fail(field, f"{rate!r}: a rate in Mbit/s within 0.001..100000")
            if all(rate is None for rate in rates.values()):
                raise fail("up_mbit" if table == "access" else "rate_mbit", "no rate given")
            if (entry.queue_bytes > 0) == (entry.queue_packets > 0) or min(
                entry.queue_bytes, entry.queue_packets
            ) < 0:
                raise fail(
                    "queue_bytes",
                    "give the queue's size as queue_bytes or queue_packets (one, > 0)",
                )
            if 0 < entry.queue_bytes < 1514:
                raise fail("queue_bytes", f"{entry.queue_bytes}: less than one full frame (1514)")
            out.append(
                LinkSetting(
                    kind=table,
                    **chosen,  # type: ignore[arg-type]
                    **rates,  # type: ignore[arg-type]
                    queue_bytes=entry.queue_bytes,
                    queue_packets=entry.queue_packets,
                    where=f"{source} {where}",
                )
            )
    return tuple(out)


def _intra(spec: _Intra | None, default: IntraLatency) -> IntraLatency:
    if spec is None:
        return default
    return IntraLatency(**msgspec.structs.asdict(spec))


def _load_spec(path: Path) -> Topology:
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"not valid TOML: {exc}", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"cannot read: {exc}", source=source) from None
    try:
        spec = msgspec.convert(data, _TopologySpec)
    except msgspec.ValidationError as exc:
        raise TopologyError(f"invalid topology spec: {exc}", source=source) from None
    if (spec.matrix is None) == (spec.sharcnet is None):
        raise TopologyError(
            "a topology spec needs exactly one of 'matrix = \"file\"' or a [sharcnet] table",
            source=source,
        )
    if spec.matrix is not None:
        matrix_path = Path(spec.matrix)
        if not matrix_path.is_absolute():
            matrix_path = path.parent / matrix_path
        topology = read_matrix(matrix_path, names=spec.names)
    else:
        gen = spec.sharcnet
        assert gen is not None  # checked above; narrows the type
        if spec.names is not None:
            raise TopologyError(
                "'names' applies to a matrix file; a generated grid names its nodes", source=source
            )
        topology = sharcnet_grid(
            load_topology(gen.inter),
            seed=gen.seed,
            clusters=tuple(gen.clusters),
            gige=None if gen.gige is None else tuple(gen.gige),
            myrinet_latency=_intra(gen.myrinet_latency, MYRINET),
            gige_latency=_intra(gen.gige_latency, GIGE),
        )
    links = _links(spec, topology, source)
    if links:
        topology = dataclasses.replace(topology, links=links)
    return topology.scaled(spec.scale)


def load_topology(ref: str | Path) -> Topology:
    """Resolve a topology reference (see the module comment) to a Topology.

    Raises:
        TopologyError: unknown name, missing file, or invalid content.
    """
    text = str(ref)
    name, _, arg = text.partition(":")
    if name == "planetlab" and not Path(text).exists():
        if not arg:
            return planetlab_frame(1)
        if not arg.isdigit():
            raise TopologyError(
                f"expected planetlab:<frame 1..18>, got {text!r}", source="<topology>"
            )
        return planetlab_frame(int(arg))
    if name == "sharcnet" and not Path(text).exists():
        if arg and not arg.isdigit():
            raise TopologyError(f"expected sharcnet:<seed>, got {text!r}", source="<topology>")
        seed = int(arg) if arg else 1
        return sharcnet_grid(planetlab_frame(1), seed=seed)
    path = Path(text)
    if path.suffix == ".toml":
        if not path.is_file():
            raise TopologyError("no such topology spec", source=text)
        return _load_spec(path)
    if not path.exists():
        raise TopologyError(
            "not a known topology (planetlab, planetlab:<frame>, sharcnet[:<seed>]) nor an existing file",
            source=text,
        )
    return read_matrix(path)


def resolve_topology(spec: TopologySpec, seed: int) -> Topology:
    """The hosts a spec's [topology] table describes in a run of `seed`: `{seed}` in `ref`
    replaced by the seed, the matrix loaded, `hosts` selected (a random pick drawn from the
    seed) and every latency multiplied by `scale`."""
    return (
        load_topology(spec.ref.replace("{seed}", str(seed)))
        .select(spec.hosts, pick=spec.pick, seed=seed if spec.pick == "random" else None)
        .scaled(spec.scale)
    )
