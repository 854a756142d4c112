"""The scenario matrix (``asrpt bench policies``): well-formed cells on a tiny configuration,
load calibration against a hand-computed offered load, the JSON and markdown outputs, and
clear errors for missing traces and bad options."""

import json
import math
from pathlib import Path

import pytest

from asrpt.cli import bench_commands
from asrpt.cli.main import main
from asrpt.core.speed import default_speed_table
from asrpt.sim.clusters import load_cluster
from asrpt.sim.matrix import (
    BASELINES,
    MATRIX_POLICIES,
    MATRIX_TRACES,
    MatrixTrace,
    calibrate_cluster,
    offered_load,
    run_matrix,
)
from asrpt.sim.traces import TraceRecord
from asrpt.sim.workload import build_jobs

SLICE = Path(__file__).parent / "data" / "philly_slice.csv"


def _synthetic(n=400, types=None):
    """n jobs, one a minute, 1-8 GPUs, 1-3 h; ``types`` cycles the accelerator type if given."""
    return [
        TraceRecord(job_id=str(i), submit_time_s=60.0 * i, duration_s=3600.0 * (1 + i % 3), accelerators=1 + (i * 7) % 8,
                    user=f"u{i % 5}", accelerator_type=types[i % len(types)] if types else None)
        for i in range(n)
    ]


def test_cli_names_mirror_the_matrix_registries():
    assert bench_commands.MATRIX_POLICY_NAMES == tuple(MATRIX_POLICIES)
    assert bench_commands.MATRIX_TRACE_NAMES == tuple(MATRIX_TRACES)
    for trace in MATRIX_TRACES.values():  # the help text states the default slice sizes
        assert f"{trace.name} {trace.default_jobs}" in bench_commands.JOBS_PER_TRACE_HELP


def test_calibration_hits_the_target_on_a_homogeneous_cluster():
    base = load_cluster("philly")
    speed = base.speed_table(default_speed_table())
    records = _synthetic()
    # By hand: ideal duration = the trace's duration (iterations = duration / alpha_min).
    work_s = sum(r.accelerators * r.duration_s for r in records)
    span_s = records[-1].submit_time_s - records[0].submit_time_s
    for target in (0.5, 0.8, 1.1):
        cluster, load = calibrate_cluster(records, base, speed, target, seed=0)
        assert load.total == pytest.approx(work_s / (cluster.accelerators_total * span_s), rel=1e-9)
        assert load.total == pytest.approx(target, rel=0.05)
        assert {p.name for p in cluster.partitions} == {"v100"}
        assert {n.accelerators_total for n in cluster.nodes} == {8}


def test_per_partition_calibration_loads_each_type_and_keeps_idle_ones_small():
    base = load_cluster("pai")
    speed = base.speed_table(default_speed_table())
    # Three quarters of the jobs want T4, a quarter V100; nobody wants MISC, P100 or V100M32.
    records = _synthetic(types=["T4", "T4", "T4", "V100"])
    cluster, load = calibrate_cluster(records, base, speed, 0.8, seed=0)
    assert load.by_partition["t4"] == pytest.approx(0.8, rel=0.05)
    assert load.by_partition["v100"] == pytest.approx(0.8, rel=0.1)  # 8-GPU nodes: coarser
    counts = {p.name: sum(1 for n in cluster.nodes if n.partition == p.name) for p in cluster.partitions}
    # Partitions no job may use keep one node; a used one at least holds its largest job.
    assert counts["misc"] == counts["v100m32"] == counts["p100"] == 1
    assert counts["t4"] >= 4
    assert load.by_partition["misc"] == 0.0
    # Scaling by the total load instead loads the pinned T4 jobs far more than the target.
    _, total_mode = calibrate_cluster(records, base, speed, 0.8, seed=0, per_partition=False)
    assert total_mode.by_partition["t4"] > 1.5


def test_offered_load_rejects_a_zero_span():
    base = load_cluster("philly")
    speed = base.speed_table(default_speed_table())
    same_time = [TraceRecord(job_id=str(i), submit_time_s=5.0, duration_s=10.0, accelerators=1) for i in range(3)]
    jobs = build_jobs(same_time, base, speed, seed=0).jobs
    with pytest.raises(Exception, match="same time"):
        offered_load(jobs, base, speed)


def test_tiny_matrix_gives_well_formed_finite_cells():
    trace = MatrixTrace("slice", "philly", "philly", str(SLICE), 50)
    policies = ["fifo", "tiresias", "asrpt/history"]
    report = run_matrix([(trace, SLICE)], seeds=[0, 1], policies=policies, loads=[0.8, 1.1], workers=1)
    cells = report["cells"]
    assert len(cells) == 2 * 2 * 3
    assert {(c["load_target"], c["seed"], c["policy"]) for c in cells} == {
        (load, seed, p) for load in (0.8, 1.1) for seed in (0, 1) for p in policies}
    for c in cells:
        for key in ("ratio_to_lower_bound", "p99_jct_s", "max_queue_s", "load", "total_jct_s"):
            assert math.isfinite(c[key]), (key, c)
        assert c["ratio_to_lower_bound"] >= 1 - 1e-9  # the bound is a bound
        assert c["max_queue_s"] >= 0 and c["p99_jct_s"] > 0 and c["jobs"] == 50
        assert c["load"] == pytest.approx(c["load_target"], rel=0.25)
    summary = report["summary"]
    assert len(summary) == 2 * 3
    for entry in summary:
        assert entry["seeds"] == [0, 1]
        r = entry["ratio_to_lower_bound"]
        assert r["min"] <= r["mean"] <= r["max"]
        if entry["policy"] == "asrpt/history":
            mine = [c for c in cells if c["policy"] == "asrpt/history" and c["load_target"] == entry["load_target"]]
            expected = [c["total_jct_s"] / min(b["total_jct_s"] for b in cells if b["policy"] in BASELINES
                                              and b["seed"] == c["seed"] and b["load_target"] == c["load_target"])
                        for c in mine]
            assert entry["vs_best_baseline"]["mean"] == pytest.approx(sum(expected) / 2)
        else:
            assert "vs_best_baseline" not in entry


def test_cli_writes_parseable_json_and_markdown_and_skips_a_missing_trace(tmp_path, capsys):
    out_json, out_md = tmp_path / "m.json", tmp_path / "m.md"
    argv = ["bench", "policies", "--quick", "--traces", "pai,philly", "--traces-dir", str(tmp_path),
            "--seeds", "0,1", "--policies", "fifo,spwf,asrpt/history", "--loads", "0.8",
            "--json", str(out_json), "--markdown", str(out_md)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "skipping trace philly" in captured.err and "cell 6/6" in captured.err
    report = json.loads(out_json.read_text())
    assert [t["name"] for t in report["config"]["traces"]] == ["pai"]
    assert len(report["cells"]) == 6 and len(report["summary"]) == 3
    markdown = out_md.read_text()
    assert markdown.startswith("| trace |") and markdown.count("| pai (120) |") == 3
    assert "asrpt/history" in captured.out
    assert "pai at 0.8:" in captured.out and "pai at 0.8:" in markdown  # the achieved load per cell


@pytest.mark.parametrize("extra, message", [
    (["--policies", "fifo,bogus"], "unknown matrix policy"),
    (["--loads", "0.8,-1"], "positive"),
    (["--seeds", "0,x"], "numbers"),
    (["--traces", "nope"], "unknown matrix trace"),
])
def test_cli_rejects_bad_options_clearly(extra, message, capsys):
    assert main(["bench", "policies", "--quick", "--traces", "pai", "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_fails_when_every_trace_is_missing(tmp_path, capsys):
    assert main(["bench", "policies", "--quick", "--traces", "philly", "--traces-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "skipping trace philly" in err and "no trace to run" in err


def test_labels_take_predictor_and_preemption_options_and_reject_others():
    from asrpt.exceptions import ConfigError
    from asrpt.sim.matrix import parse_label

    assert parse_label("asrpt/rf") == ("asrpt", "rf", {}, {})
    assert parse_label("asrpt/rf:unseen=zero:ref=history:estimate=mean:clip=3:rerank=0") == (
        "asrpt", "rf", {"rf_unseen_policy": "zero", "rf_unseen_reference": "history", "rf_estimate": "mean",
                        "rf_unseen_residual_clip": 3.0, "rf_rerank": False}, {})
    assert parse_label("asrpt-preempt/rf:ratio=16:unseen=zero:requeues=1:exempt=60") == (
        "asrpt-preempt", "rf", {"rf_unseen_policy": "zero"},
        {"preempt_ratio": 16.0, "max_requeues": 1, "preempt_exempt_s": 60.0})
    assert parse_label("asrpt-preempt/oracle:ratio=8") == ("asrpt-preempt", "oracle", {}, {"preempt_ratio": 8.0})
    for bad in ("asrpt/rf:colour=red", "qssf:unseen=zero", "asrpt/rf:clip=x", "asrpt/rf:rerank=yes", "nope",
                "asrpt/rf:ratio=16", "asrpt-preempt/oracle:unseen=zero", "asrpt-preempt/rf:ratio=0.5",
                "asrpt-preempt/rf:requeues=x"):
        with pytest.raises(ConfigError):
            parse_label(bad)


def test_calibration_keeps_room_for_a_prime_job_in_its_shape():
    """17 GPUs on 8-GPU nodes is 17 nodes x 1 (cons_tres' shape), so the floor is 17 nodes."""
    from asrpt.sim.matrix import _node_floor

    cluster = load_cluster("philly")
    speed = cluster.speed_table(default_speed_table())
    records = [TraceRecord(job_id=str(i), submit_time_s=60.0 * i, duration_s=3600.0, accelerators=17 if i == 0 else 1)
               for i in range(3)]
    jobs = build_jobs(records, cluster, speed, seed=0).jobs
    per_node = cluster.accelerators_per_node(cluster.partitions[0].name)
    assert per_node == 8
    assert _node_floor(jobs, cluster)[cluster.partitions[0].name] == 17
