# Prediction specs (kind = "predict"), their runs and `testbed table`: on
# matrices whose answer is known (a tree metric embeds exactly in DTM, points
# in a plane in GNP), so the figures checked here are the algorithms'.

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from testbed.cli import cli
from testbed.errors import InputError
from testbed.experiments.predict import _fittest, predict, run_prediction
from testbed.experiments.run import Report
from testbed.spec import DtmTechnique, PredictSpec, load_any_spec, load_spec

from ..conftest import euclidean, tree_metric


@pytest.fixture
def tree_file(tmp_path: Path) -> Path:
    path = tmp_path / "tree.txt"
    np.savetxt(path, tree_metric(40, seed=3), fmt="%.17g")
    return path


def spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def test_a_prediction_spec_runs_every_technique_per_seed_and_keeps_everything(tmp_path, tree_file):
    spec, data = load_any_spec(
        spec_file(
            tmp_path,
            f"""
kind = "predict"
name = "tree"
seeds = [4, 7]
boundary_ms = 3.0
paper = "5.4"
workers = 2
[topology]
ref = "{tree_file}"
[[techniques]]
kind = "dtm"
trees = 3
[[techniques]]
kind = "gnp"
[[techniques]]
name = "viv"
kind = "vivaldi"
rounds = 4000
neighbours = 8
nearby = 4
""",
        )
    )
    assert isinstance(spec, PredictSpec) and [t.name for t in spec.techniques] == [
        "dtm",
        "gnp",
        "viv",
    ]
    seen = []
    run, summary = run_prediction(
        spec, data, out=tmp_path / "run", report=Report(result=seen.append)
    )
    assert summary == json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["seeds"] == [4, 7]
    assert summary["hosts"] == 40 and len(seen) == 6
    dtm = summary["prediction"]["dtm"]
    assert dtm["max"] < 1e-3  # a tree metric: every tree exact, so the forest too
    assert dtm["boundary"] == {"positive": 0.0, "negative": 0.0}
    assert [s["seed"] for s in dtm["per_seed"]] == [4, 7]
    assert 0 < dtm["probes_per_host"] < 39  # trees share a host's measurements
    assert summary["prediction"]["viv"]["probes_per_host"] == 4000 / 40
    assert summary["paper"]["rows"]["dtm"] == [0.0, 0.11, 0.37, 10289.74]
    lines = (run / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 6 and "errors" not in json.loads(lines[0])
    cdf = np.loadtxt(run / "cdf.csv", delimiter=",", skiprows=1)
    assert cdf.shape == (1001, 4) and (np.diff(cdf[:, 1]) >= 0).all()
    assert (run / "cdf.png").stat().st_size > 10_000
    assert "kind" in (run / "spec.toml").read_text()


def test_the_same_spec_and_seed_give_the_same_figures(tree_file):
    noisy = np.array(euclidean(30, 2, seed=1))
    tech = DtmTechnique(name="dtm", trees=2)

    def figures(result):
        return [{k: v for k, v in run.items() if k != "cpu_s"} for run in result["per_seed"]]

    a = predict(noisy, tech, [5])
    assert figures(predict(noisy, tech, [5])) == figures(a)
    assert figures(predict(noisy, tech, [6])) != figures(a)
    # Another stream of random choices (join orders) on the same seed and matrix.
    assert figures(predict(noisy, DtmTechnique(name="dtm", trees=2, stream=0), [5])) == figures(a)
    assert figures(predict(noisy, DtmTechnique(name="dtm", trees=2, stream=1), [5])) != figures(a)


def test_a_forest_predicts_a_lower_quantile_of_its_trees(tree_file):
    # On a Euclidean plane (not a tree metric) trees err by partitioning:
    # over-estimates that differ from tree to tree; the lower quartile of
    # several trees cuts the tail.
    plane = np.array(euclidean(80, 2, seed=2))
    one = predict(plane, DtmTechnique(name="dtm"), [1, 2, 3])
    forest = predict(plane, DtmTechnique(name="dtm", trees=7), [1, 2, 3])
    assert forest["p99"] < one["p99"]
    assert forest["probes_per_host"] < 7 * one["probes_per_host"]


def test_a_fit_forest_takes_each_pair_from_the_tree_that_fits_both_hosts_measurements():
    # Three "trees" of a 6-host matrix: tree 0 misplaces host 0 (its row twice
    # too far), tree 1 host 1, tree 2 hosts 0 and 1 (half as far). Each host
    # measured its two successors.
    true = np.array(euclidean(6, 2, seed=4))
    forest = np.repeat(true[None], 3, axis=0)
    for t, hosts, factor in ((0, [0], 2.0), (1, [1], 2.0), (2, [0, 1], 0.5)):
        for h in hosts:
            forest[t, h, :] *= factor
            forest[t, :, h] *= factor
            forest[t, h, h] = 0.0
    measured = {(a, (a + k) % 6): true[a, (a + k) % 6] for a in range(6) for k in (1, 2)}
    chosen = _fittest(forest, measured)
    assert np.allclose(chosen, chosen.T)
    assert chosen[0, 3] == true[0, 3]  # tree 1: host 0 fits there, host 3 everywhere
    assert chosen[1, 4] == true[1, 4]  # tree 0
    rest = [(i, j) for i in range(2, 6) for j in range(2, 6)]
    assert all(chosen[i, j] == true[i, j] for i, j in rest)
    # Hosts 0 and 1 (mean relative error of their own measurements): tree 0
    # 1 + 0, tree 1 0.5 + 1, tree 2 0.625 + 0.5. Their pair comes from tree 0.
    assert chosen[0, 1] == forest[0, 0, 1] == 2 * true[0, 1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('kind = "predict"\nseeds = 0', "seeds: need at least one seed"),
        ('kind = "predict"\nseeds = [1, 1]', "seeds: need distinct seeds"),
        ('kind = "predict"\n[[techniques]]\nkind = "sequoia"', "Invalid value 'sequoia'"),
        ('kind = "predict"\n[[techniques]]\nkind = "dtm"\ntrees = 0', "techniques.0 (dtm).trees"),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\nnear_points = -1',
            "techniques.0 (dtm).near_points: must be at least 0",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\njump = 1.5',
            "techniques.0 (dtm).jump: must be within [0, 1]",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\nsnap = 2',
            "techniques.0 (dtm).snap: must be within [0, 1]",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\nleaf_sample = -1',
            "techniques.0 (dtm).leaf_sample: must be at least 0",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\ntree_quantile = 2',
            "techniques.0 (dtm).tree_quantile",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\ntree_choice = "best"',
            "tree_choice` (expected one of 'fit', 'quantile')",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "vivaldi"\nrounds = "n3"',
            "rounds` (expected one of 'n2', 'nlogn', or a number)",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\nstream = -1',
            "techniques.0 (dtm).stream: must be at least 0",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "gnp"\nlandmarks = 3',
            "techniques.0 (gnp).landmarks: must be at least dims + 1 = 6",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "vivaldi"\nneighbours = 4\nnearby = 5',
            "techniques.0 (vivaldi).nearby",
        ),
        (
            'kind = "predict"\n[[techniques]]\nkind = "dtm"\n[[techniques]]\nkind = "dtm"',
            "techniques: need distinct names",
        ),
        ('kind = "predict"\nnoise = {spike = 2.0}', "noise.spike"),
        ('kind = "predict"\nboundary = 1', "unknown field `boundary`"),
        (
            'kind = "predict"\nengine = "emu"\n[topology]\nref = "sharcnet:{seed}"',
            "topology.ref: the emulator runs one map",
        ),
        ('kind = "predict"\nprobe_rate = 0', "probe_rate"),
        ('kind = "churn"', "kind: expected 'can'"),
    ],
)
def test_bad_prediction_specs_name_the_field(tmp_path, text, message):
    with pytest.raises(InputError, match=re.escape(message)) as info:
        load_any_spec(spec_file(tmp_path, text))
    assert str(tmp_path / "spec.toml") in str(info.value)


def test_an_overlay_experiment_loader_refuses_a_prediction_spec(tmp_path):
    with pytest.raises(InputError, match="expected an overlay experiment"):
        load_spec(spec_file(tmp_path, 'kind = "predict"'))


def test_the_table_command_runs_the_bundled_spec_on_any_matrix(tmp_path, tree_file):
    result = CliRunner().invoke(
        cli,
        [
            "table",
            "5.2",
            "--seeds",
            "1",
            "--set",
            f'topology.ref="{tree_file}"',
            "--set",
            "techniques.2.rounds=2000",
            "--out",
            str(tmp_path / "t52"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == str(tmp_path / "t52")
    assert "thesis Table 5.2" in result.output and "0.209" in result.output  # DTM p95, UMIACS
    summary = json.loads((tmp_path / "t52" / "summary.json").read_text())
    assert set(summary["prediction"]) == {"dtm", "gnp", "vivaldi"}
    assert summary["prediction"]["dtm"]["max"] < 1e-3


def test_the_bundled_prediction_specs_load():
    root = Path(__file__).parents[2] / "scripts" / "experiments"
    names = sorted(p.name for p in root.glob("predict-*.toml"))
    assert len(names) == 5
    for name in names:
        spec, _ = load_any_spec(root / name)
        assert isinstance(spec, PredictSpec) and spec.seed_list() == list(range(1, 11))


def test_bench_probes_reports_dtm_measurements_per_peer_by_grid_size(tree_file):
    args = ["--topology", str(tree_file), "--hosts", "10,40", "--seeds", "2", "--trees", "2"]
    result = CliRunner().invoke(cli, ["bench", "probes", *args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert [r["hosts"] for r in rows] == [10, 40]
    for row in rows:
        assert 0 < row["per_host_mean"] < row["hosts"] - 1  # not everyone
        assert row["p95"] < 1e-3  # a tree metric
    jumps = CliRunner().invoke(
        cli, ["bench", "probes", *args, "--jump", "1", "--leaf-hosts", "4", "--json"]
    )
    assert jumps.exit_code == 0, jumps.output
    for row in json.loads(jumps.output)["rows"]:
        assert row["jump"] == 1 and row["leaf_hosts"] == 4 and row["p95"] < 1e-3
    snaps = CliRunner().invoke(
        cli, ["bench", "probes", *args, "--snap", "0.5", "--tree-choice", "fit", "--json"]
    )
    assert snaps.exit_code == 0, snaps.output
    for row in json.loads(snaps.output)["rows"]:
        assert row["snap"] == 0.5 and row["tree_choice"] == "fit"
        assert row["p95"] < 1e-3  # a snap that fits worse is not made; every tree is exact
    bad = CliRunner().invoke(cli, ["bench", "probes", "--hosts", "1,x"])
    assert bad.exit_code == 2 and "--hosts" in bad.output
