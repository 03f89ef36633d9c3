# The churn language: one statement per line, parsed into Statement records.
#
# Theory of operation
#   A script is read line by line: a `#` starts a comment, blank lines are
#   skipped, and every other line is one statement, `when action`, parsed by
#   lark's LALR parser with the grammar below (its contextual lexer lets a
#   unit such as `s` follow `)` without clashing with host names). Lark's
#   errors carry the column and the terminals it expected; we turn them into
#   an InputError naming file:line:column and what was expected, in words.
#   The transformer evaluates time expressions, so a Statement holds plain
#   numbers (seconds) and selectors; the compiler (_compile.py) gives them
#   meaning against the hosts of a run.
#
#   Where the language overlaps with Splay's churn generator it reads the
#   same (`at 30s join 10`, `from 5m to 10m join 10`, `churn 50%`, time
#   expressions such as `1m30s` or `(10*60-4)s`); docs/churn.md has the
#   whole grammar and what each statement does.

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from testbed.errors import InputError

__all__ = [
    "HOST_VERBS",
    "Count",
    "Group",
    "Islands",
    "Selector",
    "Statement",
    "parse_churn",
    "read_churn",
]

GRAMMAR = r"""
statement: when action

when: "at" time                 -> at
    | "from" time "to" time     -> span

action: "join" selector                     -> join
      | "leave" selector                    -> leave
      | "crash" selector                    -> crash
      | "freeze" selector                   -> freeze
      | "thaw" selector                     -> thaw
      | "restart" selector                  -> restart
      | "churn" percent ["per" time]        -> churn
      | "partition" side ("|" side)*        -> partition
      | "heal"                              -> heal
      | "set" "latency" pair latency_value  -> latency
      | "set" "loss" loss_scope percent     -> loss
      | "set" "bandwidth" loss_scope shaping -> bandwidth
      | "set" "access" group access_shaping -> access
      | "set" "reorder" loss_scope percent "gap" time -> reorder
      | "set" "duplicate" loss_scope percent -> duplicate
      | "frame" INT                         -> frame
      | "flap" pair "every" time            -> flap
      | "flood" pair "at" PER_S ["port" INT] -> flood
      | "stop"                              -> stop

side: group
    | "random" count                      -> random_side
    | "islands" count "of" NUMBER ["to" NUMBER] -> islands_side

latency_value: time | MATRIX
shaping: RATE "queue" size                -> shaped
       | OFF                              -> unshaped
access_shaping: direction+ "queue" size   -> access_shaped
              | OFF                       -> access_unshaped
direction: DIRECTION RATE
size: SIZE                                -> size_bytes
    | NUMBER "packets"                    -> size_packets
loss_scope: pair | ALL
pair: group "--" group

selector: count                           -> pick_random
        | "random" count ["of" group]     -> pick_random_of
        | "newest" count ["of" group]     -> pick_newest
        | "oldest" count ["of" group]     -> pick_oldest
        | group                           -> pick_group

group: NAME ("," NAME)*                   -> names
     | NAME "=" NAME                      -> label
     | ALL                                -> everyone

count: NUMBER                             -> absolute
     | NUMBER "%"                         -> relative
percent: NUMBER "%"

time: DURATION                            -> duration
    | NUMBER                              -> seconds
    | "(" sum ")" UNIT                    -> expression

?sum: product
    | sum "+" product                     -> add
    | sum "-" product                     -> sub
?product: atom
    | product "*" atom                    -> mul
    | product "/" atom                    -> div
?atom: NUMBER                             -> number
    | "(" sum ")"

ALL.2: "all"
MATRIX.2: "matrix"
OFF.2: "off"
DIRECTION.2: "up" | "down"
RATE.4: /\d+(\.\d+)?(kbit|mbit|gbit)(?![A-Za-z0-9_])/
SIZE.4: /\d+(\.\d+)?(B|kB|MB)(?![A-Za-z0-9_])/
PER_S.4: /\d+(\.\d+)?\/s(?![A-Za-z0-9_])/
UNIT: "ms" | "s" | "m" | "h"
DURATION.3: /(\d+(\.\d+)?(ms|h|m|s))+(?![A-Za-z0-9_])/
NUMBER: /\d+(\.\d+)?/
INT: /\d+/
NAME: /[A-Za-z_][A-Za-z0-9_.]*(-[A-Za-z0-9_.]+)*/

%import common.WS_INLINE
%ignore WS_INLINE
"""

# The verbs that act on hosts (their programs), not on the network.
HOST_VERBS = ("join", "leave", "crash", "freeze", "thaw", "restart")

_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_SECONDS = 366 * 86400.0  # a year: times beyond it are typing errors
MAX_COUNT = 10_000_000
MAX_PERCENT = 1000.0  # churn X% per T may replace the population several times over
MAX_FLOOD_PER_S = 1_000_000.0  # datagrams a second from one flooding host


def _finite(value: float, token: Token) -> float:
    if not (math.isfinite(value) and value <= MAX_SECONDS):
        raise _Fail(f"{_short(token)} is too large (times are at most a year)", token.column)
    return value


def _short(token: Token | str) -> str:
    text = str(token)
    return text if len(text) <= 24 else text[:20] + "..."


# How lark's terminal names read in an error message.
_WORDS = {
    "NAME": "a host name",
    "NUMBER": "a number",
    "INT": "a whole number",
    "DURATION": "a time such as 30s or 1m30s",
    "RATE": "a rate such as 10mbit (kbit, mbit, gbit)",
    "SIZE": "a size such as 64kB (B, kB, MB) or 50 packets",
    "PER_S": "a rate of datagrams such as 2000/s",
    "OFF": "off",
    "DIRECTION": "up or down",
    "UNIT": "a unit (ms, s, m, h)",
    "ALL": "all",
    "MATRIX": "matrix",
    "PERCENT": "%",
    "LPAR": "(",
    "RPAR": ")",
    "VBAR": "|",
    "COMMA": ",",
    "EQUAL": "=",
    "PLUS": "+",
    "MINUS": "-",
    "STAR": "*",
    "SLASH": "/",
    "$END": "the end of the line",
    "<END-OF-FILE>": "the end of the line",
}


@dataclass(frozen=True)
class Count:
    """How many: an absolute number, or a percentage (of the pool, see docs/churn.md)."""

    value: float
    percent: bool = False

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g}"


@dataclass(frozen=True)
class Group:
    """Hosts by name, by label (key=value), or all of them."""

    names: tuple[str, ...] = ()
    label: tuple[str, str] | None = None
    everyone: bool = False

    def __str__(self) -> str:
        if self.everyone:
            return "all"
        if self.label is not None:
            return f"{self.label[0]}={self.label[1]}"
        return ",".join(self.names)


@dataclass(frozen=True)
class Selector:
    """Which hosts a verb acts on: `how` is random, newest, oldest or group."""

    how: str
    count: Count | None = None
    group: Group | None = None

    def __str__(self) -> str:
        if self.how == "group":
            return str(self.group)
        text = f"{self.count}" if self.how == "random" else f"{self.how} {self.count}"
        return f"{text} of {self.group}" if self.group is not None else text


@dataclass(frozen=True)
class Islands:
    """Partition sides: `count` of the hosts up (on no other side), in random groups of
    `smallest` to `largest` hosts, each group cut off from everyone else."""

    count: Count
    smallest: int
    largest: int

    def __str__(self) -> str:
        sizes = f"{self.smallest}" + (
            f" to {self.largest}" if self.largest != self.smallest else ""
        )
        return f"islands {self.count} of {sizes}"


@dataclass(frozen=True)
class Statement:
    """One line of a script: when (at `start`, or from `start` to `end`) and what."""

    verb: str
    start: float
    end: float | None
    line: int
    column: int  # of the action
    text: str
    selector: Selector | None = None
    groups: tuple[
        Group | Selector | Islands, ...
    ] = ()  # partition's sides (random k: a Selector); a pair
    value: float | None = (
        None  # latency (s, RTT; None: the matrix's), loss rate, frame, churn share
    )
    period: float | None = None  # churn ... per T; flap every T
    source: str = "<churn>"
    extra: dict[str, object] = field(default_factory=dict)

    def where(self) -> str:
        return f"{self.source}:{self.line}"


_parser = Lark(GRAMMAR, start="statement", parser="lalr", propagate_positions=True)


class _Fail(Exception):
    def __init__(self, reason: str, column: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.column = column


@v_args(inline=True)
class _ToStatement(Transformer):
    """Parse tree -> Statement fields (times in seconds, validated)."""

    # -- times ---------------------------------------------------------------------------------
    def duration(self, token: Token) -> tuple[float, int]:
        total, number = 0.0, ""
        text = str(token)
        k = 0
        while k < len(text):
            ch = text[k]
            if ch.isdigit() or ch == ".":
                number += ch
                k += 1
                continue
            unit = "ms" if text.startswith("ms", k) else ch
            total += float(number) * _UNIT_S[unit]
            number = ""
            k += len(unit)
        return _finite(total, token), token.column

    def seconds(self, token: Token) -> tuple[float, int, bool]:
        """A bare number: seconds (as in Splay), flagged so a latency can refuse it."""
        return _finite(float(token), token), token.column, True

    def expression(self, value: float, unit: Token) -> tuple[float, int]:
        seconds = value * _UNIT_S[str(unit)]
        if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SECONDS:
            raise _Fail(
                f"the time expression comes to {seconds:g} s; expected 0 to a year", unit.column
            )
        return seconds, unit.column

    def number(self, token: Token) -> float:
        return _finite(float(token), token)

    def add(self, a: float, b: float) -> float:
        return a + b

    def sub(self, a: float, b: float) -> float:
        return a - b

    def mul(self, a: float, b: float) -> float:
        return a * b

    def div(self, a: float, b: float) -> float:
        if b == 0:
            raise _Fail("division by zero in a time expression", 1)
        return a / b

    # -- when ----------------------------------------------------------------------------------
    def at(self, t: tuple[float, int]) -> tuple[float, None]:
        return t[0], None

    def span(self, a: tuple[float, int], b: tuple[float, int]) -> tuple[float, float]:
        if not b[0] > a[0]:
            raise _Fail(f"`from {a[0]:g}s to {b[0]:g}s`: the end must come after the start", b[1])
        return a[0], b[0]

    # -- selectors -----------------------------------------------------------------------------
    def absolute(self, token: Token) -> Count:
        value = float(token)
        if value > MAX_COUNT:
            raise _Fail(f"{_short(token)} hosts: a count is at most {MAX_COUNT:,}", token.column)
        if value != int(value):
            raise _Fail(f"a count of hosts is a whole number, not {token}", token.column)
        return Count(value)

    def relative(self, token: Token) -> Count:
        value = float(token)
        if value > 100:
            raise _Fail(f"{token}% is more than all of them (at most 100%)", token.column)
        return Count(value, percent=True)

    def percent(self, token: Token) -> tuple[float, int]:
        value = float(token)
        if value > MAX_PERCENT:
            raise _Fail(f"{_short(token)}%: at most {MAX_PERCENT:,.0f}%", token.column)
        return value, token.column

    def names(self, *tokens: Token) -> Group:
        return Group(names=tuple(str(t) for t in tokens))

    def label(self, key: Token, value: Token) -> Group:
        return Group(label=(str(key), str(value)))

    def everyone(self, _: Token) -> Group:
        return Group(everyone=True)

    def pick_random(self, count: Count) -> Selector:
        return Selector("random", count)

    def pick_random_of(self, count: Count, group: Group | None) -> Selector:
        return Selector("random", count, group)

    def pick_newest(self, count: Count, group: Group | None) -> Selector:
        return Selector("newest", count, group)

    def pick_oldest(self, count: Count, group: Group | None) -> Selector:
        return Selector("oldest", count, group)

    def pick_group(self, group: Group) -> Selector:
        return Selector("group", group=group)

    def side(self, group: Group) -> Group:
        return group

    def random_side(self, count: Count) -> Selector:
        return Selector("random", count)

    def islands_side(self, count: Count, smallest: Token, largest: Token | None) -> Islands:
        low = float(smallest)
        high = low if largest is None else float(largest)
        if not (low.is_integer() and high.is_integer() and 1 <= low <= high):
            raise _Fail(
                f"islands of {_short(smallest)}"
                + ("" if largest is None else f" to {_short(largest)}")
                + ": whole numbers of hosts, the smallest first",
                smallest.column,
            )
        return Islands(count, int(low), int(high))

    def pair(self, a: Group, b: Group) -> tuple[Group, Group]:
        return a, b

    def latency_value(
        self, value: tuple[float, int] | tuple[float, int, bool] | Token
    ) -> float | None:
        if isinstance(value, Token):
            return None
        if len(value) == 3:  # a bare number: 120 would be 120 seconds, which nobody means
            raise _Fail(
                f"a latency needs a unit: {value[0]:g}ms or {value[0]:g}s (an RTT)", value[1]
            )
        return value[0]

    def loss_scope(self, scope: tuple[Group, Group] | Token) -> tuple[Group, ...]:
        return () if isinstance(scope, Token) else scope

    # -- bandwidth -------------------------------------------------------------------------------
    def _rate_mbit(self, token: Token) -> float:
        text = str(token)
        number, unit = float(text[:-4]), text[-4:]
        mbit = number * {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}[unit]
        if not 0.001 <= mbit <= 100_000:
            raise _Fail(f"{text}: a rate is within 1kbit..100gbit", token.column)
        return mbit

    def size_bytes(self, token: Token) -> dict[str, int]:
        text = str(token)
        unit = text.lstrip("0123456789.")
        value = float(text[: len(text) - len(unit)]) * {"B": 1, "kB": 1000, "MB": 1_000_000}[unit]
        if value != int(value) or not 1514 <= value <= 1 << 30:
            raise _Fail(
                f"{text}: a queue holds at least one full frame (1514B) and at most 1GB",
                token.column,
            )
        return {"queue_bytes": int(value)}

    def size_packets(self, token: Token) -> dict[str, int]:
        value = float(token)
        if value != int(value) or not 1 <= value <= 1_000_000:
            raise _Fail(f"{token} packets: a whole number within 1..1000000", token.column)
        return {"queue_packets": int(value)}

    def shaped(self, rate: Token, size: dict[str, int]) -> dict[str, object]:
        return {"rate_mbit": self._rate_mbit(rate), **size}

    def unshaped(self, _: Token) -> dict[str, object]:
        return {}

    def direction(self, which: Token, rate: Token) -> tuple[str, float, int]:
        return str(which), self._rate_mbit(rate), which.column

    def access_shaped(self, *parts: object) -> dict[str, object]:
        *directions, size = parts
        out: dict[str, object] = dict(size)  # type: ignore[call-overload]
        for which, mbit, column in directions:  # type: ignore[misc]
            key = f"{which}_mbit"
            if key in out:
                raise _Fail(f"`{which}` is given twice", column)
            out[key] = mbit
        return out

    def access_unshaped(self, _: Token) -> dict[str, object]:
        return {}


def _action_fields(verb: str, args: list[object]) -> dict[str, object]:
    if verb in HOST_VERBS:
        return {"selector": args[0]}
    if verb == "churn":
        share, column = args[0]  # type: ignore[misc]
        period = args[1][0] if args[1] is not None else None  # type: ignore[index]
        if period is not None and period <= 0:
            raise _Fail("`churn ... per T` needs T > 0", column)
        return {"value": share / 100.0, "period": period}
    if verb == "partition":
        return {"groups": tuple(args)}
    if verb == "latency":
        return {"groups": args[0], "value": args[1]}
    if verb == "loss":
        rate, column = args[1]  # type: ignore[misc]
        if rate > 100:
            raise _Fail(f"a loss rate of {rate:g}% is more than 100%", column)
        return {"groups": args[0], "value": rate / 100.0}
    if verb in ("bandwidth", "access"):
        return {"groups": args[0] if verb == "bandwidth" else (args[0],), "extra": args[1]}
    if verb in ("reorder", "duplicate"):
        rate, column = args[1]  # type: ignore[misc]
        if rate > 100:
            raise _Fail(f"a {verb} rate of {rate:g}% is more than 100%", column)
        fields: dict[str, object] = {"groups": args[0], "value": rate / 100.0}
        if verb == "reorder":
            gap = args[2]
            if len(gap) == 3 or not 0 < gap[0] <= 60:  # type: ignore[arg-type]
                raise _Fail("the reorder gap needs a unit and is within 0..60s, as in 10ms", gap[1])  # type: ignore[index]
            fields["extra"] = {"gap_s": gap[0]}  # type: ignore[index]
        return fields
    if verb == "frame":
        return {"value": float(args[0])}  # type: ignore[arg-type]
    if verb == "flood":
        rate, port = args[1], args[2]
        assert isinstance(rate, Token)
        per_s = float(str(rate)[:-2])
        if not 0 < per_s <= MAX_FLOOD_PER_S:
            raise _Fail(
                f"{rate}: a flood's rate is above 0/s and at most {MAX_FLOOD_PER_S:,.0f}/s",
                rate.column,
            )
        extra: dict[str, object] = {}
        if port is not None:
            assert isinstance(port, Token)
            if not 1 <= int(port) <= 65535:
                raise _Fail(f"port {port}: a UDP port is within 1..65535", port.column)
            extra["port"] = float(int(port))
        return {"groups": args[0], "value": per_s, "extra": extra}
    if verb == "flap":
        period = args[1][0]  # type: ignore[index]
        if period <= 0:
            raise _Fail("`flap ... every T` needs T > 0", args[1][1])  # type: ignore[index]
        return {"groups": args[0], "period": period}
    return {}


def _expected(error: UnexpectedInput) -> str:
    names = sorted(getattr(error, "expected", None) or getattr(error, "allowed", None) or [])
    words = []
    for name in names:
        if name in _WORDS:
            words.append(_WORDS[name])
        else:
            try:
                pattern = _parser.get_terminal(name).pattern
            except KeyError:
                words.append(name.lower())
                continue
            words.append(f"`{pattern.value}`" if pattern.type == "str" else name.lower())
    words = sorted(set(words))
    if not words:
        return ""
    if len(words) == 1:
        return f"; expected {words[0]}"
    return "; expected " + ", ".join(words[:-1]) + " or " + words[-1]


def _unit_hint(text: str, pos: int) -> str | None:
    """For `at 6x`: a time whose unit is wrong (a number run straight into
    letters where a time is expected: after at, from, to, per, every)."""
    number = re.search(r"(?:^|\s)(at|from|to|per|every)\s+([\dhms.]*?)(\d+(?:\.\d+)?)$", text[:pos])
    if number is None or pos >= len(text) or not text[pos].isalpha():
        return None
    n = number.group(3)
    word = re.match(r"[A-Za-z]+", text[pos:])
    shown = word.group() if word else text[pos]
    if shown in _UNIT_S or number.group(2):
        return "in a time every number needs its unit, as in 1m30s or 90s"
    return f"unexpected {shown!r} after {n}; expected a time unit ({n}ms, {n}s, {n}m or {n}h)"


def _parse_line(text: str, line: int, source: str) -> Statement:
    try:
        tree = _parser.parse(text)
    except UnexpectedCharacters as exc:
        pos = exc.pos_in_stream
        bad = text[pos] if pos < len(text) else "?"
        raise InputError(
            _unit_hint(text, pos) or f"unexpected {bad!r}{_expected(exc)}",
            source=source,
            line=line,
            column=exc.column,
        ) from None
    except UnexpectedEOF as exc:
        raise InputError(
            f"the statement ends too early{_expected(exc)}",
            source=source,
            line=line,
            column=len(text) + 1,
        ) from None
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        if token is None or token.type == "$END":
            reason, column = "the statement ends too early", len(text.rstrip()) + 1
        else:
            reason, column = f"unexpected {_short(token)!r}", exc.column
            hint = _unit_hint(text, token.start_pos) if token.start_pos is not None else None
            if hint:
                raise InputError(hint, source=source, line=line, column=column) from None
        raise InputError(reason + _expected(exc), source=source, line=line, column=column) from None
    when_tree, action_tree = tree.children
    try:
        start, end = _ToStatement().transform(when_tree)
        action = _ToStatement().transform(action_tree)
        fields = _action_fields(action.data, list(action.children))
    except VisitError as exc:
        inner = exc.orig_exc
        if isinstance(inner, _Fail):
            raise InputError(inner.reason, source=source, line=line, column=inner.column) from None
        raise InputError(
            f"cannot read this statement ({inner})", source=source, line=line, column=1
        ) from None
    except _Fail as exc:
        raise InputError(exc.reason, source=source, line=line, column=exc.column) from None
    column = action_tree.meta.column if not action_tree.meta.empty else 1
    return Statement(
        verb=str(action.data),
        start=start,
        end=end,
        line=line,
        column=column,
        text=text.strip(),
        source=source,
        **fields,  # type: ignore[arg-type]
    )


def parse_churn(text: str, source: str = "<churn>") -> list[Statement]:
    """Parse a churn script; raises InputError (file:line:column, what was expected)."""
    statements = []
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0]
        if not body.strip():
            continue
        if "\t" in body:
            body = body.replace("\t", " ")  # columns count characters; a tab is one
        statements.append(_parse_line(body, number, source))
    return statements


def read_text(path: str | Path, what: str) -> str:
    """A user's text file, or an InputError that names it (`what`: "churn script")."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"no such {what}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror or exc}", source=str(path)) from None


def read_churn(path: str | Path) -> list[Statement]:
    """Parse a .churn file."""
    return parse_churn(read_text(path, "churn script"), str(path))
