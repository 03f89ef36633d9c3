# The churn language: parsing (with positions in every error), compiling to a
# deterministic schedule, Splay availability traces, and a property test that
# feeds generated and mutated scripts to the parser.

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.churn import Universe, compile_churn, parse_churn, trace_schedule
from testbed.errors import InputError

NAMES = [f"h{k}" for k in range(1, 41)]
LABELS = [{"cluster": f"c{k % 4}"} for k in range(40)]
UNIVERSE = Universe(NAMES, LABELS, frames=18)


def compile_text(text: str, seed: int = 1, universe: Universe = UNIVERSE):
    return compile_churn(parse_churn(text, "t.churn"), universe, seed, "t.churn")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("(10*60-4)s", 596.0),
        ("500ms", 0.5),
        ("1h2m3.5s", 3723.5),
        ("45", 45.0),
        ("( 2 * (3 + 1) / 4 )m", 120.0),
    ],
)
def test_time_expressions(text, seconds):
    (statement,) = parse_churn(f"at {text} join 1")
    assert statement.start == pytest.approx(seconds)


def test_every_statement_kind_parses_to_its_fields():
    script = """
    # a comment, then blank lines

    at 0s join 64            # trailing comment
    from 1m to 2m join 10%
    at 3m crash random 3 of cluster=c3
    from 5m to 6m freeze newest 2
    at 7m thaw all
    from 8m to 20m churn 5% per 1m
    from 9m to 10m partition h1,h2 | h4 | cluster=c2
    at 10m heal
    from 11m to 12m set latency cluster=c1 -- cluster=c2 120ms
    at 13m set latency h1 -- h2 matrix
    at 13m set loss all 5%
    at 15m frame 3
    from 16m to 17m flap h1 -- c3-17 every 5s
    from 18m to 19m flood h1 -- cluster=c2 at 2500/s
    from 18m to 19m flood h2 -- h3 at 0.5/s port 9000
    at 30m stop
    """
    s = parse_churn(script, "t.churn")
    assert [x.verb for x in s] == [
        "join", "join", "crash", "freeze", "thaw", "churn", "partition", "heal",
        "latency", "latency", "loss", "frame", "flap", "flood", "flood", "stop",
    ]  # fmt: skip
    assert s[0].line == 4 and s[0].selector.count.value == 64
    assert s[1].selector.count.percent and (s[1].start, s[1].end) == (60, 120)
    assert s[2].selector.how == "random" and s[2].selector.group.label == ("cluster", "c3")
    assert s[3].selector.how == "newest"
    assert s[4].selector.group.everyone
    assert s[5].value == pytest.approx(0.05) and s[5].period == 60
    assert [g.names or g.label for g in s[6].groups] == [("h1", "h2"), ("h4",), ("cluster", "c2")]
    assert s[8].value == pytest.approx(0.120) and s[9].value is None
    assert s[10].groups == () and s[10].value == pytest.approx(0.05)
    assert s[11].value == 3 and s[12].period == 5 and s[12].groups[1].names == ("c3-17",)
    assert s[13].value == 2500 and s[13].groups[1].label == ("cluster", "c2") and not s[13].extra
    assert s[14].value == 0.5 and s[14].extra == {"port": 9000}


@pytest.mark.parametrize(
    ("text", "line", "column", "says"),
    [
        ("at join 5", 1, 4, "expected ("),
        ("at 5s jion 3", 1, 7, "`join`"),
        ("at 5s join", 1, 11, "ends too early"),
        ("\n\nfrom 5s to 3s join 1", 3, 12, "end must come after"),
        ("at 5s join 2.5", 1, 12, "whole number"),
        ("at 5s leave 150%", 1, 13, "at most 100%"),
        ("at (3-5)s join 1", 1, 9, "expected 0 to a year"),
        ("at 5s partition h1 |", 1, 21, "ends too early"),
        ("at 5s flap h1 -- h2 every 0s", 1, 27, "T > 0"),
        ("from 1s to 2s flood h1 -- h2 at 0/s", 1, 33, "above 0/s"),
        ("from 1s to 2s flood h1 -- h2 at 5", 1, 33, "a rate of datagrams such as 2000/s"),
        ("from 1s to 2s flood h1 -- h2 at 5/s port 0", 1, 42, "within 1..65535"),
        ("at 1s join 1\nat 2s set loss h1 -- h2 101%", 2, 25, "more than 100%"),
        ("at 5s join €", 1, 12, "unexpected '€'"),
        ("at 1s crash " + "9" * 400, 1, 13, "at most 10,000,000"),
        ("at " + "9" * 400 + "s join 2", 1, 4, "too large"),
        ("at 1s churn " + "9" * 400 + "%", 1, 13, "at most 1,000%"),
    ],
)
def test_syntax_errors_name_line_column_and_what_was_expected(text, line, column, says):
    with pytest.raises(InputError) as caught:
        parse_churn(text, "bad.churn")
    error = caught.value
    assert (error.source, error.line, error.column) == ("bad.churn", line, column)
    assert says in error.reason
    assert str(error).startswith(f"bad.churn:{line}:{column}: ")


def test_a_schedule_is_deterministic_per_seed():
    script = "at 0s join 20\nfrom 10s to 60s churn 50%\nat 70s crash 25%"
    a, b, c = compile_text(script, 1), compile_text(script, 1), compile_text(script, 2)
    assert a.events == b.events and a.events != c.events
    assert a.to_jsonl() == b.to_jsonl()


def test_counts_are_spread_and_states_are_held():
    s = compile_text(
        "at 0s join 10\nfrom 10s to 20s join 4\nfrom 30s to 40s freeze 3\n"
        "from 50s to 60s partition cluster=c0 | cluster=c1\nfrom 70s to 80s frame 5"
    )
    joins = [e for e in s.events if e.verb == "join"]
    assert [e.t for e in joins] == [0, 10, 12.5, 15, 17.5]
    assert len(joins[0].hosts) == 10 and all(len(e.hosts) == 1 for e in joins[1:])
    freeze, thaw = (e for e in s.events if e.verb in ("freeze", "thaw"))
    assert (freeze.t, thaw.t) == (30, 40) and freeze.hosts == thaw.hosts and len(freeze.hosts) == 3
    assert [(e.t, e.verb) for e in s.events if e.verb in ("partition", "heal")] == [
        (50, "partition"),
        (60, "heal"),
    ]
    assert [(e.t, e.value) for e in s.events if e.verb == "frame"] == [(70, 5), (80, 1)]
    assert s.end == 80


def test_churn_keeps_the_population_and_percentages_are_of_hosts_up():
    s = compile_text("at 0s join 20\nat 10s churn 25%\nfrom 20s to 40s churn 10% per 5s")
    up: set[str] = set()
    for e in s.events:
        if e.verb == "join":
            assert not up & set(e.hosts)  # only idle hosts join
            up |= set(e.hosts)
        elif e.verb == "leave":
            assert set(e.hosts) <= up
            up -= set(e.hosts)
    assert len(up) == 20
    at10 = [e for e in s.events if e.t == 10]
    assert [(e.verb, len(e.hosts)) for e in at10] == [("leave", 5), ("join", 5)]
    # 10 % of 20 per 5 s over 20 s: 8 replacements, one every 2.5 s.
    assert [e.t for e in s.events if e.verb == "leave" and e.t >= 20] == [
        20 + 2.5 * k for k in range(8)
    ]


def test_newest_picks_the_most_recently_joined():
    s = compile_text("at 0s join h1,h2,h3\nat 5s join h9\nat 6s join h4\nat 10s crash newest 2")
    (crash,) = (e for e in s.events if e.verb == "crash")
    assert crash.hosts == ("h4", "h9")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("at 0s join 41", 1, "only 40 can"),
        ("at 0s join 5\nat 1s crash h39", 2, "h39 cannot crash: it is not up"),
        ("at 0s join 5\nat 1s leave cluster=c9", 2, "no host has the label cluster=c9"),
        ("at 0s join h99", 1, "no host is named 'h99'"),
        ("at 5s frame 19", 1, "frames 1..18"),
        ("at 0s join 3\nat 5s stop\nat 6s join 1", 3, "not before `stop` at 5s (line 2)"),
        ("from 0s to 5s heal", 1, "write `at T`"),
        ("at 5s flap h1 -- h2 every 1s", 1, "needs a span"),
        ("at 5s flood h1 -- h2 at 9/s", 1, "needs a span"),
        ("from 0s to 5s flood h1 -- h1 at 9/s", 1, "no target but its own sources"),
        (
            "from 0s to 5s flood h1 -- h2 at 9/s\nfrom 4s to 6s flood h3,h1 -- h2 at 9/s",
            2,
            "h1 already floods from 0s to 5s (line 1)",
        ),
        ("at 0s join 40\nat 1s churn 10%", 2, "only 0 are idle"),
        ("at 0s partition h1,h2 | h2,h3", 1, "h2 is on two sides"),
        ("at 0s partition all", 1, "no partition"),
        ("at 0s join 4\nat 5s stop\nat 5s crash 1", 3, "not before `stop`"),
        ("from 0s to 100s partition h1\nfrom 10s to 20s partition h2", 2, "overlaps the partition"),
        ("from 0s to 10s frame 2\nfrom 5s to 15s frame 3", 2, "overlaps the frame"),
        ("at 1s set latency h1 -- h2 200s", 1, "beyond 120 s"),
        ("from 1s to 1h flap h1 -- h2 every 1ms", 1, "more than 200,000"),
        ("at 0s join 40\nfrom 1s to 2s churn 50% per 0.00001s", 2, "more than 200,000"),
    ],
)
def test_impossible_scripts_are_rejected_with_the_line(text, line, says):
    with pytest.raises(InputError) as caught:
        compile_text(text)
    assert caught.value.line == line and says in caught.value.reason, str(caught.value)


def test_a_timed_freeze_thaws_only_what_it_froze():
    s = compile_text(
        "at 0s join h1,h2\nfrom 1s to 10s freeze h1\nat 2s crash h1\nat 3s join h1\n"
        "from 4s to 20s freeze h1"
    )
    assert [(e.t, e.verb) for e in s.events if e.hosts == ("h1",)] == [
        (1, "freeze"),
        (2, "crash"),
        (3, "join"),
        (4, "freeze"),
        (20, "thaw"),
    ]


def test_the_last_check_comes_before_stop():
    s = compile_text("at 0s join 5\nat 40s stop")
    assert s.quiet_periods(30) == [30]
    assert compile_text("at 0s join 5\nat 10s stop").quiet_periods(30) == []  # never quiet
    tight = compile_text("at 0s join 5\nat 0.5s crash 1")
    assert tight.quiet_periods(0.5) == [0.5, 1.0]  # after the events, never before them


def test_quiet_periods_follow_each_burst():
    s = compile_text("at 0s join 10\nat 1s join 2\nat 30s crash 2\nat 100s leave 1")
    assert s.quiet_periods(10) == [11, 40, 110]


def test_splay_availability_trace():
    text = "# node on/off times\n0 10 20\n\n5 6\n3\n"
    s = trace_schedule(text, NAMES[:4], source="t.trace")
    assert [(e.t, e.verb, e.hosts[0]) for e in s.events] == [
        (0, "join", "h1"),
        (3, "join", "h4"),
        (5, "join", "h3"),
        (6, "leave", "h3"),
        (10, "leave", "h1"),
        (20, "join", "h1"),
    ]
    crashes = trace_schedule("0 1", NAMES, down="crash")
    assert [e.verb for e in crashes.events] == ["join", "crash"]
    with pytest.raises(InputError) as caught:
        trace_schedule("0 10\n5 4", NAMES, source="t.trace")
    assert (caught.value.line, caught.value.column) == (2, 3) and "increase" in caught.value.reason
    with pytest.raises(InputError) as caught:
        trace_schedule("0 x", NAMES, source="t.trace")
    assert (caught.value.line, caught.value.column) == (1, 3)
    with pytest.raises(InputError, match="more nodes"):
        trace_schedule("0\n0\n0", NAMES[:2])


# -- property test: generated and mutated scripts ------------------------------------------------

_times = st.one_of(
    st.integers(0, 3600).map(str),
    st.integers(0, 3600).map(lambda v: f"{v}s"),
    st.tuples(st.integers(0, 59), st.integers(0, 59)).map(lambda mv: f"{mv[0]}m{mv[1]}s"),
    st.integers(0, 5000).map(lambda v: f"{v}ms"),
    st.tuples(st.integers(1, 60), st.integers(0, 59)).map(lambda ab: f"({ab[0]}*60-{ab[1]})s"),
)
_groups = st.one_of(
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(",".join),
    st.sampled_from([f"cluster=c{k}" for k in range(4)]),
    st.just("all"),
)
_counts = st.one_of(st.integers(0, 50).map(str), st.integers(0, 100).map(lambda v: f"{v}%"))
_selectors = st.one_of(
    _counts,
    st.tuples(st.sampled_from(["random", "newest", "oldest"]), _counts, st.none() | _groups).map(
        lambda t: f"{t[0]} {t[1]}" + (f" of {t[2]}" if t[2] else "")
    ),
    _groups,
)
_actions = st.one_of(
    st.tuples(st.sampled_from(["join", "leave", "crash", "freeze", "thaw"]), _selectors).map(
        " ".join
    ),
    st.tuples(st.integers(0, 100), st.none() | _times).map(
        lambda t: f"churn {t[0]}%" + (f" per {t[1]}" if t[1] else "")
    ),
    st.lists(_groups, min_size=2, max_size=3).map(lambda gs: "partition " + " | ".join(gs)),
    st.just("heal"),
    st.tuples(_groups, _groups, st.one_of(_times, st.just("matrix"))).map(
        lambda t: f"set latency {t[0]} -- {t[1]} {t[2]}"
    ),
    st.integers(1, 20).map(lambda f: f"frame {f}"),
    st.tuples(_groups, _groups, _times).map(lambda t: f"flap {t[0]} -- {t[1]} every {t[2]}"),
    st.tuples(_groups, _groups, st.integers(0, 10**7)).map(
        lambda t: f"flood {t[0]} -- {t[1]} at {t[2]}/s"
    ),
)
_whens = st.one_of(
    _times.map(lambda t: f"at {t}"),
    st.tuples(_times, _times).map(lambda ab: f"from {ab[0]} to {ab[1]}"),
)
_lines = st.tuples(_whens, _actions).map(" ".join)
_scripts = st.lists(_lines, min_size=1, max_size=12).map("\n".join)


def _parse_or_positioned_error(text: str) -> None:
    try:
        statements = parse_churn(text, "p.churn")
    except InputError as error:
        lines = text.splitlines()
        assert error.source == "p.churn"
        assert error.line is not None and 1 <= error.line <= len(lines)
        assert error.column is not None and 1 <= error.column <= len(lines[error.line - 1]) + 1
        return
    try:
        compile_churn(statements, UNIVERSE, seed=1, source="p.churn")
    except InputError as error:
        assert error.line is not None and error.column is not None


_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(_scripts)
def test_generated_scripts_parse_or_fail_with_a_position(text):
    _parse_or_positioned_error(text)


@_settings
@given(_scripts, st.data())
def test_mutated_scripts_never_crash_the_parser(text, data):
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(chars)))
        kind = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        char = data.draw(st.sampled_from([*list("0123456789smh%|,=-()*/+ .#\tabz€\x00"), "--"]))
        if kind == "insert":
            chars.insert(where, char)
        elif where < len(chars):
            if kind == "delete":
                del chars[where]
            else:
                chars[where] = char
    _parse_or_positioned_error("".join(chars))


@_settings
@given(st.text(max_size=80))
def test_arbitrary_text_never_crashes_the_parser(text):
    _parse_or_positioned_error(text)


def test_a_percentage_of_a_group_is_of_that_group():
    # cluster=c1 holds h2, h6, ..., h38: ten of the forty hosts.
    s = compile_text(
        "at 0s join random 50% of cluster=c1\nat 1s join 10%\nat 2s crash random 40% of cluster=c1"
    )
    group, everyone, crash = s.events
    assert len(group.hosts) == 5 and all(int(h[1:]) % 4 == 2 for h in group.hosts)
    assert len(everyone.hosts) == 4  # a tenth of all forty
    up_in_c1 = sum(1 for h in {*group.hosts, *everyone.hosts} if int(h[1:]) % 4 == 2)
    assert len(crash.hosts) == round(0.4 * up_in_c1)
    assert all(int(h[1:]) % 4 == 2 for h in crash.hosts)


def test_bandwidth_access_reorder_and_duplicate_compile_with_units_and_undo():
    hosts = [f"h{k}" for k in range(1, 5)]
    labels = [{"cluster": "a"}, {"cluster": "a"}, {"cluster": "b"}, {"cluster": "b"}]
    script = "\n".join(
        [
            "from 10s to 20s set bandwidth cluster=a -- cluster=b 10mbit queue 64kB",
            "at 5s set access h1,h2 down 100mbit up 20mbit queue 50 packets",
            "at 30s set access h1,h2 off",
            "from 1s to 2s set reorder all 5% gap 10ms",
            "at 3s set duplicate h1 -- h3 1%",
        ]
    )
    schedule = compile_churn(parse_churn(script), Universe(hosts, labels), seed=1)
    records = [schedule.record(e) for e in schedule.events]
    by = {(r["verb"], r["t_s"]): r for r in records}
    assert by[("bandwidth", 10.0)]["between"] == [["h1", "h2"], ["h3", "h4"]]
    assert by[("bandwidth", 10.0)]["rate_mbit"] == 10.0
    assert by[("bandwidth", 10.0)]["queue_bytes"] == 64000
    assert by[("bandwidth", 20.0)]["removed"] is True  # the span's end
    access = by[("access", 5.0)]
    assert (access["down_mbit"], access["up_mbit"], access["queue_packets"]) == (100.0, 20.0, 50)
    assert access["hosts"] == ["h1", "h2"]
    assert by[("access", 30.0)]["removed"] is True
    assert by[("reorder", 1.0)]["reorder_rate"] == 0.05 and by[("reorder", 1.0)]["gap_ms"] == 10.0
    assert by[("reorder", 2.0)]["reorder_rate"] == 0.0
    assert by[("duplicate", 3.0)]["duplicate_rate"] == 0.01


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("at 1s set bandwidth h1 -- h2 10 queue 64kB", "a rate such as 10mbit"),
        ("at 1s set bandwidth h1 -- h2 10mbit queue 100B", "one full frame"),
        ("at 1s set bandwidth h1 -- h2 10mbit", "the statement ends too early"),
        ("at 1s set access h1 up 1mbit up 2mbit queue 64kB", "`up` is given twice"),
        ("at 1s set reorder all 5% gap 10", "needs a unit"),
        ("at 1s set duplicate all 150%", "more than 100%"),
        ("at 1s set bandwidth h1 -- h2 200gbit queue 1MB", "within 1kbit..100gbit"),
    ],
)
def test_bad_shaping_statements_name_the_column(text, says):
    with pytest.raises(InputError, match=says) as info:
        parse_churn(text, "s.churn")
    assert str(info.value).startswith("s.churn:1:")


def test_a_script_that_leaves_too_little_room_is_reported():
    universe = Universe([f"h{k}" for k in range(1, 61)])
    script = (
        "at 0s join 40\nat 40s leave 2\nat 71s crash 1\nfrom 110s to 500s churn 50%\nat 600s stop"
    )
    schedule = compile_churn(parse_churn(script), universe, seed=1)
    warnings = schedule.room_warnings(30.0, leave_s=2.0)
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("line 2: leaves at t=40 s, then 31 s until the next event")
    assert warnings[1].startswith("no quiet period from t=110 s to t=")
    # With room for a leave, and quiet periods in the churn, nothing to say.
    roomy = "at 0s join 40\nat 40s leave 2\nat 75s crash 1\nat 110s stop"
    assert compile_churn(parse_churn(roomy), universe, seed=1).room_warnings(30.0, 2.0) == []
    # A check sooner after a crash than its repair may take: said, with the crash's line.
    tight = "at 0s join 40\nat 30s crash 2\nat 41s leave 1\nat 60s stop"
    schedule = compile_churn(parse_churn(tight), universe, seed=1)
    assert schedule.room_warnings(10.0, 2.0, crash_s=11.5) == [
        (
            "line 2: a crash at t=30 s, checked at t=40 s: sooner than its repair may take "
            "(11.5 s: suspect_after_s, an update tick, the probe and the takeover); the check "
            "may find its zone unowned"
        )
    ]
    assert schedule.room_warnings(10.0, 2.0, crash_s=9.5) == []
    # A crash followed too soon for a check of its own counts at the next check.
    later = "at 0s join 40\nat 30s crash 2\nat 33s freeze 1\nat 44s leave 1\nat 60s stop"
    schedule = compile_churn(parse_churn(later), universe, seed=1)
    assert [w[:44] for w in schedule.room_warnings(10.0, 2.0, crash_s=14.0)] == [
        "line 2: a crash at t=30 s, checked at t=43 s"
    ]
    assert schedule.room_warnings(10.0, 2.0, crash_s=12.0) == []


def test_islands_cut_small_groups_of_the_peers_up_off_from_everyone():
    universe = Universe([f"h{k}" for k in range(1, 41)])
    script = "at 0s join 30\nfrom 10s to 20s partition islands 20% of 2 to 3\nat 30s stop"
    schedule = compile_churn(parse_churn(script), universe, seed=4)
    (cut,) = [e for e in schedule.events if e.verb == "partition"]
    joined = {h for e in schedule.events if e.verb == "join" for h in e.hosts}
    islands = [set(side) for side in cut.groups]
    assert sum(map(len, islands)) == 6 and all(2 <= len(i) <= 3 for i in islands)
    assert set().union(*islands) <= joined  # peers up, not idle hosts
    assert len(schedule.record(cut)["sides"]) == len(islands) + 1  # and the rest
    one = compile_churn(
        parse_churn("at 0s join 5\nfrom 1s to 2s partition islands 1 of 1"), universe, seed=1
    )
    assert [len(s) for s in next(e for e in one.events if e.verb == "partition").groups] == [1]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("from 1s to 2s partition islands 2 of 3 to 2", "the smallest first"),
        ("from 1s to 2s partition islands 2 of 1.5", "whole numbers"),
        ("from 1s to 2s partition islands 50 of 2", "islands of 50 host(s) in all, but 5 are up"),
    ],
)
def test_bad_islands_are_errors(line, error):
    universe = Universe([f"h{k}" for k in range(1, 41)])
    with pytest.raises(InputError, match=re.escape(error)):
        compile_churn(parse_churn("at 0s join 5\n" + line), universe, seed=1)
