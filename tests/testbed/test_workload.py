# Job traces: the SWF reader (every bad line named), filters, slicing,
# compression, run-time scaling, synthetic workloads, and the bundled traces.

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.errors import InputError
from testbed.workload import (
    Job,
    Workload,
    compress,
    describe,
    head,
    parse_swf,
    read_swf,
    scale_runtime,
    select,
    shortest_slice,
    synthetic,
    write_swf,
)

TRACES = Path(__file__).parents[2] / "traces" / "pwa"
LINE = "{job} {submit} 5 {run} {procs} 0 100 {procs} 600 -1 1 1 1 1 1 -1 -1 -1"


def trace(*rows: tuple[int, float, float, int]) -> Workload:
    text = "; MaxProcs: 64\n" + "\n".join(
        LINE.format(job=j, submit=s, run=r, procs=p) for j, s, r, p in rows
    )
    return parse_swf(text.splitlines(), "t.swf")


def test_the_bundled_traces_read_whole():
    das = read_swf(TRACES / "DAS2-fs1-2003-1.swf.gz")
    assert len(das) == 40_315 and das.header_value("MaxProcs") == "64"
    assert das.jobs[0] == Job(1, 0, 2, 1924, 8, 0, 8632, 8, 7200, -1, 1, 1, 1, 1, 1, -1, -1, -1)
    hpc = read_swf(TRACES / "hpc2n-excerpt.swf.gz")
    assert len(hpc) == 3_170 and max(job.size for job in hpc.jobs) == 128


@pytest.mark.parametrize(
    ("line", "column", "says"),
    [
        ("1 0 5 10 4 0 100 4 600 -1 1 1 1 1 1 -1 -1", None, "18 fields, this one 17"),
        ("1 0 5 10 x 0 100 4 600 -1 1 1 1 1 1 -1 -1 -1", 5, "field 5 (procs): expected a number"),
        ("1 0 5 10 -4 0 100 4 600 -1 1 1 1 1 1 -1 -1 -1", 5, ">= 0 or -1"),
        ("1 0 5 10 2.5 0 100 4 600 -1 1 1 1 1 1 -1 -1 -1", 5, "whole number"),
        ("1 -1 5 10 4 0 100 4 600 -1 1 1 1 1 1 -1 -1 -1", 2, "submit time is required"),
        ("1 nan 5 10 4 0 100 4 600 -1 1 1 1 1 1 -1 -1 -1", 2, ">= 0 or -1"),
    ],
)
def test_a_bad_line_is_named_with_its_field(line, column, says):
    text = ["; header", "", LINE.format(job=1, submit=0, run=10, procs=4), line]
    with pytest.raises(InputError) as caught:
        parse_swf(text, "bad.swf")
    assert (caught.value.source, caught.value.line, caught.value.column) == ("bad.swf", 4, column)
    assert says in caught.value.reason


def test_unreadable_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such workload"):
        read_swf(tmp_path / "missing.swf")
    broken = tmp_path / "broken.swf.gz"
    broken.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="not a readable SWF"):
        read_swf(broken)


def test_select_keeps_known_jobs_in_the_size_range():
    w = trace((1, 0, 10, 1), (2, 1, 10, 4), (3, 2, -1, 4), (4, 3, 10, 128), (5, 4, 10, 2))
    unknown = "6 5 5 -1 4 0 100 4 -1 -1 1 1 1 1 1 -1 -1 -1"  # neither run nor requested time
    w = Workload([*w.jobs, *parse_swf([unknown]).jobs], w.header)
    # Job 3's run time is unknown: its requested time (600 s) stands in.
    assert [j.job for j in select(w, min_size=2).jobs] == [2, 3, 4, 5]
    assert [j.job for j in select(w, min_size=2, max_size=64).jobs] == [2, 3, 5]
    assert "kept 3 of 6 jobs" in select(w, min_size=2, max_size=64).notes[-1]


def test_the_shortest_slice_is_the_tightest_run_of_k_jobs():
    w = trace((1, 0, 5, 2), (2, 100, 5, 2), (3, 150, 5, 2), (4, 160, 5, 2), (5, 400, 5, 2))
    tight = shortest_slice(w, 3)
    assert [j.job for j in tight.jobs] == [2, 3, 4]
    assert [j.submit_s for j in tight.jobs] == [0, 50, 60]  # rebased
    with pytest.raises(InputError, match="cannot slice 6"):
        shortest_slice(w, 6)


def test_compression_scales_the_submissions_into_the_window():
    w = trace((1, 1000, 30, 2), (2, 1500, 40, 2), (3, 3000, 50, 4))
    squeezed = compress(w, 100)
    assert [j.submit_s for j in squeezed.jobs] == [0, 25, 100]
    assert [j.run_s for j in squeezed.jobs] == [30, 40, 50]  # run times untouched
    assert [j.run_s for j in scale_runtime(squeezed, 0.5).jobs] == [15, 20, 25]
    assert [j.job for j in head(squeezed, 2).jobs] == [1, 2]


def test_written_traces_read_back_with_what_was_done(tmp_path):
    w = compress(select(read_swf(TRACES / "hpc2n-excerpt.swf.gz"), min_size=2), 3600)
    write_swf(w, tmp_path / "out.swf")
    back = read_swf(tmp_path / "out.swf")
    assert back.jobs == w.jobs
    text = (tmp_path / "out.swf").read_text()
    assert ";  Testbed: submissions compressed" in text and "; Acknowledge" in text.replace(
        ";  ", "; "
    )


def test_the_intense_recipe_on_das2():
    # seed 002 §4.3: parallel jobs only, the 1,000 submitted over the shortest
    # interval, submissions compressed into 643 s.
    das = read_swf(TRACES / "DAS2-fs1-2003-1.swf.gz")
    intense = compress(shortest_slice(select(das, min_size=2), 1000), 643)
    figures = describe(intense)
    assert figures["jobs"] == 1000 and figures["span_s"] == 643
    assert figures["parallel_share"] == 1.0 and figures["max_procs"] == 64
    assert figures["offered_load"] > 1  # far more work than the 64 processors can do in time


def test_synthetic_workloads_are_seeded():
    a, b, c = synthetic(200, seed=1), synthetic(200, seed=1), synthetic(200, seed=2)
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert {j.size for j in a.jobs} <= {1, 2, 4, 8, 16, 32, 64}
    assert all(b.submit_s >= a.submit_s for a, b in zip(a.jobs, a.jobs[1:], strict=False))
    assert 20 < describe(a)["span_s"] / 199 < 45  # mean inter-arrival 30 s


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="0123456789-. x;\t", max_size=60), max_size=6))
def test_any_text_reads_or_fails_with_a_line(lines):
    try:
        parse_swf(lines, "fuzz.swf")
    except InputError as error:
        assert error.line is not None and 1 <= error.line <= len(lines)
