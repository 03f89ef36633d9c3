# Latency matrices: parsing, validation and the Topology value.
#
# Theory of operation
#   A Topology is an immutable N x N matrix of latencies in milliseconds with
#   RTT semantics (entry (i, j) is the round-trip time measured from node i to
#   node j, as in the PlanetLab data), plus a name and labels per node and a
#   line of provenance. The one-way delay the WAN applies to a packet from i to
#   j is rtt_ms[i, j] / 2, so an asymmetric matrix gives asymmetric one-way
#   delays, and the RTT of the pair is (rtt_ms[i, j] + rtt_ms[j, i]) / 2.
#
# Rules
#   1. Everything that reaches a Topology has been validated: square, finite,
#      non-negative, complete. The diagonal is forced to 0 (a node's latency to
#      itself is never used).
#   2. Errors on files name file:line:field and what was expected; the first
#      error wins (one clear message beats a hundred).
#   3. Topologies never change; selection, scaling and clamping return new ones.

from __future__ import annotations

import gzip
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np

from testbed.errors import TopologyError

__all__ = ["Topology", "read_matrix", "write_matrix"]

# Markers that other data sets use for "not measured". We name them in the
# error so the user knows why the file was refused.
_MISSING_MARKERS = frozenset({"", "-", "?", "na", "n/a", "nan", "null", "none", "x"})

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class LinkSetting:
    """A topology spec's bandwidth setting, on hosts chosen by node name or label.

    kind "access": `hosts` get access links (up_mbit, down_mbit, queue_*);
    kind "bandwidth": every pair from `src` to `dst` gets a path (rate_mbit, queue_*).
    A selector is "all", "key=value" (a label) or a tuple of node names.
    """

    kind: str
    hosts: str | tuple[str, ...] = ()
    src: str | tuple[str, ...] = ()
    dst: str | tuple[str, ...] = ()
    up_mbit: float | None = None
    down_mbit: float | None = None
    rate_mbit: float | None = None
    queue_bytes: int = 0
    queue_packets: int = 0
    where: str = ""  # "<file> [[access]] #1", for messages

    def matches(
        self, selector: str | tuple[str, ...], name: str, labels: Mapping[str, str]
    ) -> bool:
        if selector == "all":
            return True
        if isinstance(selector, str):
            key, _, value = selector.partition("=")
            return labels.get(key) == value
        return name in selector


@dataclass(frozen=True, eq=False)
class Topology:
    """An immutable latency matrix with node names and labels.

    Attributes:
        rtt_ms: (n, n) float64 array, RTT in milliseconds; diagonal 0; read-only.
        names: one unique name per node, e.g. "n17" or "c3-12".
        labels: one mapping per node, e.g. {"cluster": "c3"} (may be empty).
        source: where the matrix came from and what was done to it.
        links: bandwidth settings of a topology spec ([[access]], [[bandwidth]]),
            applied by the emulator at bring-up.
    """

    rtt_ms: np.ndarray
    names: tuple[str, ...]
    labels: tuple[Mapping[str, str], ...] = ()
    source: str = "<memory>"
    links: tuple[LinkSetting, ...] = ()
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        matrix = np.array(self.rtt_ms, dtype=np.float64, copy=True)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise TopologyError(
                f"matrix must be square, got shape {matrix.shape}", source=self.source
            )
        n = matrix.shape[0]
        if n < 1:
            raise TopologyError("matrix is empty", source=self.source)
        if len(self.names) != n:
            raise TopologyError(f"{len(self.names)} names for {n} nodes", source=self.source)
        if len(set(self.names)) != n:
            dupes = sorted({x for x in self.names if self.names.count(x) > 1})
            raise TopologyError(f"duplicate node names: {', '.join(dupes[:5])}", source=self.source)
        bad = ~np.isfinite(matrix)
        if bad.any():
            i, j = map(int, np.argwhere(bad)[0])
            raise TopologyError(
                f"entry ({i}, {j}) is {float(matrix[i, j])}; expected a finite number",
                source=self.source,
            )
        if (matrix < 0).any():
            i, j = map(int, np.argwhere(matrix < 0)[0])
            raise TopologyError(
                f"entry ({i}, {j}) is negative ({float(matrix[i, j])} ms)", source=self.source
            )
        np.fill_diagonal(matrix, 0.0)
        matrix.setflags(write=False)
        labels = (
            tuple(MappingProxyType(dict(x)) for x in self.labels)
            if self.labels
            else (_EMPTY_LABELS,) * n
        )
        if len(labels) != n:
            raise TopologyError(f"{len(labels)} label sets for {n} nodes", source=self.source)
        object.__setattr__(self, "rtt_ms", matrix)
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "_index", {name: k for k, name in enumerate(self.names)})

    # -- queries -------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.names)

    def index(self, name: str) -> int:
        """Return the index of the node called `name`.

        Raises:
            TopologyError: no node has that name (the message lists a few that exist).
        """
        try:
            return self._index[name]
        except KeyError:
            sample = ", ".join(self.names[:3])
            raise TopologyError(
                f"unknown host {name!r}; this topology's nodes are named like {sample}, ... "
                f"({self.n} in all)",
                source=self.source,
            ) from None

    def one_way_ms(self) -> np.ndarray:
        """One-way delay per ordered pair: rtt_ms / 2 (a new, writable array)."""
        return self.rtt_ms / 2.0

    def pair_rtt_ms(self, i: int, j: int) -> float:
        """RTT of the pair as a probe from i to j would see it: d(i, j) + d(j, i)."""
        return float(self.rtt_ms[i, j] + self.rtt_ms[j, i]) / 2.0

    @property
    def is_symmetric(self) -> bool:
        return bool(np.array_equal(self.rtt_ms, self.rtt_ms.T))

    def off_diagonal(self) -> np.ndarray:
        """All off-diagonal entries as a flat array (empty for a single node)."""
        return self.rtt_ms[~np.eye(self.n, dtype=bool)]

    def pairs_below(self, floor_rtt_ms: float) -> list[tuple[int, int]]:
        """Ordered pairs (i != j) whose entry is below `floor_rtt_ms`."""
        low = self.rtt_ms < floor_rtt_ms
        np.fill_diagonal(low, False)
        return [(int(i), int(j)) for i, j in np.argwhere(low)]

    def stats(self) -> dict[str, float | int | bool]:
        """Summary figures: node count, min/median/p95/max RTT, symmetry."""
        values = self.off_diagonal()
        if values.size == 0:
            return {"nodes": self.n, "symmetric": True}
        return {
            "nodes": self.n,
            "min_ms": float(values.min()),
            "p5_ms": float(np.percentile(values, 5)),
            "median_ms": float(np.median(values)),
            "p95_ms": float(np.percentile(values, 95)),
            "max_ms": float(values.max()),
            "symmetric": self.is_symmetric,
        }

    # -- derived topologies ----------------------------------------------------

    def subset(self, indices: Sequence[int], how: str) -> Topology:
        """Return the topology restricted to `indices`, in that order."""
        idx = np.asarray(indices, dtype=np.intp)
        return Topology(
            self.rtt_ms[np.ix_(idx, idx)],
            tuple(self.names[k] for k in idx),
            tuple(self.labels[k] for k in idx),
            f"{self.source} | {how}",
            self.links,
        )

    def select(
        self,
        count: int | None = None,
        *,
        pick: str = "first",
        seed: int | None = None,
        hosts: Iterable[str | int] | None = None,
    ) -> Topology:
        """Choose the nodes to emulate.

        Args:
            count: how many nodes (with pick="first" or "random").
            pick: "first" (the first `count` nodes) or "random" (a seeded sample).
            seed: seed for pick="random" (required there, so runs are reproducible).
            hosts: an explicit list of node names or 0-based indices, instead of count.

        Raises:
            TopologyError: unknown names, out-of-range indices, duplicates, a count
                larger than the matrix, or a bad `pick`.
        """
        if hosts is not None:
            if count is not None:
                raise TopologyError(
                    "give either a host count or an explicit host list, not both", source="<hosts>"
                )
            chosen: list[int] = []
            for item in hosts:
                if isinstance(item, int) or (
                    isinstance(item, str) and item.isdigit() and item not in self._index
                ):
                    k = int(item)
                    if not 0 <= k < self.n:
                        raise TopologyError(
                            f"host index {k} is out of range 0..{self.n - 1}", source="<hosts>"
                        )
                else:
                    k = self.index(str(item))
                if k in chosen:
                    raise TopologyError(f"host {self.names[k]!r} is listed twice", source="<hosts>")
                chosen.append(k)
            if not chosen:
                raise TopologyError("the host list is empty", source="<hosts>")
            return self.subset(
                chosen,
                f"hosts {','.join(self.names[k] for k in chosen[:6])}{'...' if len(chosen) > 6 else ''}",
            )
        if count is None:
            return self
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise TopologyError(
                f"host count must be a positive integer, not {count!r}", source="<hosts>"
            )
        if count > self.n:
            raise TopologyError(
                f"asked for {count} hosts but the matrix has only {self.n} nodes", source="<hosts>"
            )
        if pick == "first":
            return self.subset(range(count), f"first {count}")
        if pick == "random":
            if seed is None:
                raise TopologyError(
                    "pick='random' needs a seed, so that the run can be repeated", source="<hosts>"
                )
            chosen = sorted(random.Random(seed).sample(range(self.n), count))
            return self.subset(chosen, f"random {count} seed {seed}")
        raise TopologyError(f"pick must be 'first' or 'random', not {pick!r}", source="<hosts>")

    def scaled(self, factor: float) -> Topology:
        """Return the topology with every latency multiplied by `factor` (> 0)."""
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise TopologyError(
                f"scale must be a positive finite number, not {factor!r}", source="<scale>"
            )
        if factor == 1:
            return self
        return Topology(
            self.rtt_ms * factor,
            self.names,
            self.labels,
            f"{self.source} | scale {factor:g}",
            self.links,
        )

    def clamped(self, floor_rtt_ms: float) -> tuple[Topology, int]:
        """Raise every off-diagonal entry below `floor_rtt_ms` to it.

        Returns:
            (the new topology, how many ordered pairs were raised).
        """
        below = self.pairs_below(floor_rtt_ms)
        if not below:
            return self, 0
        matrix = np.array(self.rtt_ms)
        low = matrix < floor_rtt_ms
        np.fill_diagonal(low, False)
        matrix[low] = floor_rtt_ms
        return Topology(
            matrix,
            self.names,
            self.labels,
            f"{self.source} | clamp {floor_rtt_ms:.3f} ms",
            self.links,
        ), len(below)

    def with_rtt(self, rtt_ms: np.ndarray, how: str) -> Topology:
        """Same nodes, another matrix (e.g. another time frame of the same hosts)."""
        return Topology(rtt_ms, self.names, self.labels, f"{self.source} | {how}", self.links)


# -- files ---------------------------------------------------------------------------------------


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="strict")
    return path.open("r", encoding="utf-8", errors="strict")


def _parse_field_untrusted(token: str, source: str, line: int, column: int) -> float:
    """Parse one matrix entry; may raise TopologyError only."""
    if token.lower() in _MISSING_MARKERS:
        shown = token if token else "(empty)"
        raise TopologyError(
            f"missing value {shown!r}; the matrix must be complete (every pair measured)",
            source=source,
            line=line,
            column=column,
        )
    try:
        value = float(token)
    except ValueError:
        raise TopologyError(
            f"{token!r} is not a number", source=source, line=line, column=column
        ) from None
    if math.isnan(value):
        raise TopologyError(
            "NaN; expected a latency in ms", source=source, line=line, column=column
        )
    if math.isinf(value):
        raise TopologyError(
            f"{token!r} is infinite; expected a latency in ms",
            source=source,
            line=line,
            column=column,
        )
    if value < 0:
        hint = (
            " (-1 is a common missing-value marker; this format needs every pair)"
            if value == -1
            else ""
        )
        raise TopologyError(
            f"negative latency {token}{hint}", source=source, line=line, column=column
        )
    return value


def read_matrix(path: str | Path, *, names: Sequence[str] | None = None) -> Topology:
    """Read an N x N latency matrix (RTT, milliseconds) from a text file.

    Format: one row per line, entries separated by whitespace or commas; lines
    that are blank or start with '#' are ignored; a '.gz' suffix is read
    through gzip; a '.npy' file is read with numpy and validated the same way.
    The diagonal is not used (forced to 0) but must still parse.

    Args:
        path: the file.
        names: node names; default "n0", "n1", ... by row.

    Raises:
        TopologyError: with file:line:field for unreadable, non-square, negative,
            NaN, infinite or missing entries.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise TopologyError("no such matrix file", source=source)
    if path.suffix == ".npy":
        try:
            matrix = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise TopologyError(f"not a readable .npy array: {exc}", source=source) from None
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise TopologyError(f"matrix must be square, got shape {matrix.shape}", source=source)
    else:
        rows: list[list[float]] = []
        width: int | None = None
        first_line = 0
        try:
            with _open_text(path) as stream:
                for line_no, raw in enumerate(stream, start=1):
                    text = raw.strip()
                    if not text or text.startswith("#"):
                        continue
                    tokens = _split_csv(text) if "," in text else text.split()
                    if width is None:
                        width, first_line = len(tokens), line_no
                    elif len(tokens) != width:
                        raise TopologyError(
                            f"row has {len(tokens)} values but the first row (line {first_line}) has {width}; "
                            "every row must have one value per node",
                            source=source,
                            line=line_no,
                        )
                    rows.append(
                        [
                            _parse_field_untrusted(tok, source, line_no, col)
                            for col, tok in enumerate(tokens, 1)
                        ]
                    )
        except UnicodeDecodeError as exc:
            raise TopologyError(
                f"not a text file ({exc.reason} at byte {exc.start})", source=source
            ) from None
        except (OSError, EOFError) as exc:
            raise TopologyError(f"cannot read: {exc}", source=source) from None
        if not rows:
            raise TopologyError(
                "no matrix rows (the file is empty or only comments)", source=source
            )
        if len(rows) != width:
            raise TopologyError(
                f"matrix is not square: {len(rows)} rows of {width} values; expected {width} rows",
                source=source,
            )
        matrix = np.array(rows, dtype=np.float64)
    n = matrix.shape[0]
    node_names = tuple(names) if names is not None else tuple(f"n{k}" for k in range(n))
    return Topology(matrix, node_names, (), source)


def _split_csv(text: str) -> list[str]:
    return [tok.strip() for tok in text.split(",")]


def write_matrix(topology: Topology, path: str | Path) -> None:
    """Write the matrix in the text format read_matrix reads (gzip if '.gz')."""
    path = Path(path)
    # One %-format per row and the fastest gzip level: 25 M values (5,000 hosts) in
    # about 6 s instead of 18.
    row_format = "\t".join(["%.6g"] * topology.n) + "\n"
    with (
        gzip.open(path, "wt", encoding="utf-8", compresslevel=1)
        if path.suffix == ".gz"
        else open(path, "w", encoding="utf-8")
    ) as stream:
        stream.write(
            f"# {topology.source}\n# RTT in ms, row = source node, column = destination node\n"
        )
        for row in topology.rtt_ms.tolist():
            stream.write(row_format % tuple(row))
