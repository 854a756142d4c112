"""``asrpt simulate --jobs OUT.csv``: one row per job, policy and seed, consistent with the
metrics of the same run and with the cluster's node size."""

import csv
import json
import math
from pathlib import Path

from asrpt.cli.main import main
from asrpt.sim.job_rows import JOB_COLUMNS

SLICE = Path(__file__).parent / "data" / "philly_slice.csv"

# 2 accelerators per node, so a job of g accelerators spans at least ceil(g / 2) nodes.
SMALL_NODES = """
name = "two-per-node"
[[partitions]]
name = "gpu"
accelerator = "v100"
nodes = 40
accelerators_per_node = 2
"""


def _run(tmp_path, *extra):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(SMALL_NODES)
    jobs_csv, report_json = tmp_path / "jobs.csv", tmp_path / "report.json"
    argv = ["simulate", "--trace", str(SLICE), "--format", "philly", "--cluster", str(cluster),
            "--policy", "fifo", "--policy", "asrpt", "--policy", "tiresias", "--seed", "0", "--seed", "3",
            "--no-progress", "--jobs", str(jobs_csv), "--json", str(report_json), *extra]
    assert main(argv) == 0
    with jobs_csv.open(newline="") as stream:
        reader = csv.DictReader(stream)
        return reader.fieldnames, list(reader), json.loads(report_json.read_text())


def test_one_row_per_job_policy_and_seed_consistent_with_the_metrics(tmp_path):
    header, rows, report = _run(tmp_path)
    assert header == list(JOB_COLUMNS)
    jobs = report["jobs"]
    for seed_block in report["seeds"]:
        seed = seed_block["seed"]
        for policy, metrics in seed_block["policies"].items():
            mine = [r for r in rows if r["policy"] == policy and int(r["seed"]) == seed]
            assert len(mine) == jobs and len({r["job_id"] for r in mine}) == jobs
            for r in mine:
                submit, start, end = float(r["submit_s"]), float(r["start_s"]), float(r["end_s"])
                assert start >= submit and end > start
                assert math.isclose(float(r["wait_s"]), start - submit, abs_tol=2e-3)
                assert math.isclose(float(r["jct_s"]), end - submit, abs_tol=2e-3)
                g, nodes = int(r["accelerators"]), int(r["nodes"])
                assert math.ceil(g / 2) <= nodes <= g
                assert r["partition"] == "gpu" and int(r["preemptions"]) >= 0
            total = sum(float(r["jct_s"]) for r in mine)
            assert math.isclose(total, metrics["total_jct_s"], rel_tol=1e-6)
            assert math.isclose(max(float(r["wait_s"]) for r in mine), metrics["max_queue_s"], abs_tol=2e-3)
            assert sum(int(r["preemptions"]) for r in mine) == metrics["preemptions"]
    assert len(rows) == jobs * 3 * 2
    # The slice has multi-GPU jobs, so some first run must span several 2-GPU nodes.
    assert any(int(r["nodes"]) > 1 for r in rows)


def test_jobs_with_forecast_is_a_clear_error(tmp_path, capsys):
    argv = ["simulate", "--trace", str(SLICE), "--format", "philly", "--cluster", "testbed", "--no-progress",
            "--jobs", str(tmp_path / "jobs.csv"), "--forecast"]
    assert main(argv) == 2
    assert "--jobs cannot be combined with --forecast" in capsys.readouterr().err
    assert not (tmp_path / "jobs.csv").exists()
