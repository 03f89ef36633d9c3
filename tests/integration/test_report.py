# A run's report (timeline.png, report.html) from its folder alone, rendered in
# headless Chromium (Debian's package): the page shows its figures and its plot.

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testbed.experiments.report import write_report


def _jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "gossip-run"
    (folder / "wan").mkdir(parents=True)
    summary = {
        "name": "gossip-run",
        "engine": "emu",
        "seed": 3,
        "status": "complete",
        "hosts": 32,
        "invariants": {"violations": 1},
        "wan": {
            "fidelity": {
                "samples": 600, "error_p50_ms": 0.03, "error_p99_ms": 0.35,
                "within_bound": 0.998, "bound": "max(0.5 ms, 2% of RTT)", "kept_up": True,
            }
        },
        "churn": {"events_applied": 12, "lateness_ms": {"p50": 2.1, "p99": 14.0}},
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    t0 = 1_000_000.0
    _jsonl(
        folder / "applied.jsonl",
        [{"t": t0 + k, "kind": v, "applied_t": float(k), "due_t": float(k)}
         for k, v in enumerate(["join", "join", "crash", "freeze", "thaw", "partition"])],
    )  # fmt: skip
    _jsonl(
        folder / "checks.jsonl",
        [{"t": 3.0, "members": ["h1", "h2"], "ok": True, "quiet_s": 1.0},
         {"t": 7.0, "members": ["h1"], "ok": False, "quiet_s": 1.0}],
    )  # fmt: skip
    _jsonl(
        folder / "wan" / "fidelity.jsonl",
        [
            {
                "started": t0 + k,
                "error_p50_ms": 0.02,
                "error_p99_ms": 0.3,
                "pair_error_ms": [[1, 2, 0.01], [3, 4, 0.2]],
            }
            for k in (0, 4, 8)
        ],
    )
    return folder


def test_the_report_has_the_figures_the_checks_and_the_timeline(run_dir):
    page = write_report(run_dir)
    assert (run_dir / "timeline.png").stat().st_size > 10_000
    text = page.read_text()
    assert "gossip-run (emu, seed 3)" in text
    assert "violations after quiet periods" in text and "p99 0.35 ms" in text
    assert text.count("<tr><td>") >= 4 and "class='bad'>1<" in text
    assert 'src="data:image/png;base64,' in text  # the page stands alone


def test_the_report_renders_in_headless_chromium(run_dir, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "make install installs Debian's chromium"
    page = write_report(run_dir)
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<h1>gossip-run (emu, seed 3)</h1>" in dom.stdout
    assert 'id="timeline"' in dom.stdout and 'id="checks"' in dom.stdout
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1100,1600", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (1600, 1100)
    # Not a blank page: the plot's lines and the tables' text make many distinct colours.
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50


def test_testbed_report_rewrites_a_folders_report(run_dir):
    out = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "report", str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().endswith("report.html")
    bad = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "report", str(run_dir / "wan")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no summary.json" in bad.stderr
