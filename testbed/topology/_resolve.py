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

import os
import tomllib
from pathlib import Path

import msgspec

from testbed.errors import TopologyError
from testbed.spec import TopologySpec
from testbed.topology._matrix import Topology, read_matrix
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


class _TopologySpec(msgspec.Struct, forbid_unknown_fields=True):
    matrix: str | None = None
    names: list[str] | None = None
    scale: float = 1.0
    sharcnet: _Sharcnet | None = None


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
