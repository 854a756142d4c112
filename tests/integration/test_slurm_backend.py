"""SlurmCliBackend against the real local test-bed (contrib/slurm/testbed).

The cluster: node1, node2 with gpu:a100:8 (partition a100), node3 with gpu:v100:4 (v100),
both in the default umbrella partition gpu; node4 with npu:8 (npu). Jobs are sleeps.
"""

from __future__ import annotations

import dataclasses
import time
import tomllib
from pathlib import Path

import pytest

from asrpt.core.model import Decision, Placement
from asrpt.daemon.config import load_config as load_daemon_config
from asrpt.exceptions import SlurmUnreachable
from asrpt.slurm.cli_backend import PRIORITY_AUTO_MAX, SlurmBackendConfig, SlurmCliBackend
from asrpt.slurm.parsing import parse_squeue_json
from asrpt.slurm.runner import SlurmRunner

from .conftest import LocalCluster

pytestmark = pytest.mark.slurm


def apply(backend, decision, **kwargs):
    """Apply and return what was written."""
    backend.apply(decision, **kwargs)
    return backend.last_apply


def load_config(cluster: LocalCluster, **overrides) -> SlurmBackendConfig:
    """The backend configuration as the daemon reads it from the test-bed's asrpt.toml."""
    config = load_daemon_config(cluster.dir / "asrpt.toml", environ={})
    return dataclasses.replace(config.slurm, **overrides)


def make_backend(cluster: LocalCluster, **overrides) -> SlurmCliBackend:
    return SlurmCliBackend(load_config(cluster, **overrides))


def admin_comment(cluster: LocalCluster, job_id: str) -> str:
    _, jobs = parse_squeue_json(cluster.run("squeue", "--json").stdout)
    return next(j.admin_comment for j in jobs if j.job_id == job_id)


def test_asrpt_toml_matches_the_cluster(cluster):
    config = load_config(cluster)
    assert config.slurm_conf == cluster.slurm_conf and config.jobcomp_log == cluster.jobcomp_log
    assert [p.name for p in config.partitions] == ["a100", "v100", "npu"]
    with open(cluster.dir / "asrpt.toml", "rb") as handle:
        doc = tomllib.load(handle)
    assert doc["database"]["url"] == f"sqlite:///{cluster.dir}/asrpt.db"
    assert doc["wrapper"]["real_sbatch"] == "/usr/bin/sbatch"


def test_snapshot_sees_pending_jobs_and_free_accelerators(cluster):
    fill1 = cluster.sbatch("-p", "a100", "-w", "node1", "--gres=gpu:a100:8")
    fill2 = cluster.sbatch("-p", "a100", "-w", "node2", "--gres=gpu:a100:6")
    v100 = cluster.sbatch("-p", "v100", "--gres=gpu:v100:3")
    for job in (fill1, fill2, v100):
        cluster.wait_state(job, "RUNNING")
    a100_job = cluster.sbatch("-p", "a100", "--gres=gpu:a100:4", "-t", "1-02:03:04", "-J", "wants a100")
    typed = cluster.sbatch("--gres=gpu:v100:2", "--comment", "asrpt:tp=2,class=bert")
    spread = cluster.sbatch("--gpus=12")
    later = cluster.sbatch("-p", "npu", "--gres=npu:2", "--begin=now+3600")
    held = cluster.sbatch("--hold", "--gres=gpu:1")

    snap = make_backend(cluster).snapshot()

    free = {n.name: (n.partition, n.accelerators_total, n.accelerators_free) for n in snap.nodes}
    assert free == {"node1": ("a100", 8, 0), "node2": ("a100", 8, 2), "node3": ("v100", 4, 1), "node4": ("npu", 8, 8)}
    pending = {j.job_id: j for j in snap.pending}
    assert set(pending) == {a100_job, typed, spread}  # begin-time and held jobs are left out
    assert pending[a100_job].accelerators == 4 and pending[a100_job].allowed_partitions == ("a100",)
    assert pending[a100_job].time_limit_s == 1564 * 60 and pending[a100_job].group == "root/wants a100"
    assert pending[typed].allowed_partitions == ("v100",) and pending[typed].allowed_accelerators == ("v100",)
    assert pending[typed].parallel.tensor == 2 and pending[typed].workload_class == "bert"
    assert pending[spread].accelerators == 12 and pending[spread].allowed_partitions == ("a100", "v100")
    assert pending[a100_job].submit_time_s == pytest.approx(time.time(), abs=60)
    running = {r.job.job_id: r for r in snap.running}
    assert set(running) == {fill1, fill2, v100}
    assert running[fill2].placement.worker_nodes == ("node2",) * 6
    assert running[v100].placement.partition == "v100" and running[v100].job.accelerators == 3
    assert later not in pending and held not in pending


def test_apply_orders_and_pins_and_slurm_starts_in_that_order(cluster):
    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8") for node in ("node1", "node2")]
    for job in fillers:
        cluster.wait_state(job, "RUNNING")
    jobs = [cluster.sbatch("-p", "a100", "--gres=gpu:a100:8", "-J", f"order{i}", wrap="sleep 2") for i in range(4)]
    backend = make_backend(cluster)
    snap = backend.snapshot()
    assert {j.job_id for j in snap.pending} >= set(jobs)

    # The reverse of submission order; the first two pinned crosswise.
    order = tuple(reversed(jobs))
    starts = (
        Placement(job_id=order[0], partition="a100", worker_nodes=("node2",) * 8, iteration_time_s=1.0),
        Placement(job_id=order[1], partition="a100", worker_nodes=("node1",) * 8, iteration_time_s=1.0),
    )
    report = apply(backend, Decision(order=order, starts=starts))
    assert report.pins == 2 and report.failures == []
    priorities = [int(cluster.field(j, "%Q")) for j in order]
    assert priorities == sorted(priorities, reverse=True) and min(priorities) > PRIORITY_AUTO_MAX
    assert cluster.field(order[0], "%n") == "node2" and cluster.field(order[1], "%n") == "node1"
    assert "asrpt[pin]:" in admin_comment(cluster, order[0])

    cluster.run("scancel", *fillers)
    for job in jobs:
        cluster.wait_state(job, "COMPLETED", timeout=40)
    ended = {r.job_id: r for r in backend.finished_jobs(0.0)}
    assert ended[order[0]].nodes == ("node2",) and ended[order[1]].nodes == ("node1",)
    first_two = max(ended[j].start_time_s for j in order[:2])
    assert all(ended[j].start_time_s >= first_two for j in order[2:])


def test_hold_and_release(cluster):
    fill = cluster.sbatch("-p", "npu", "--gres=npu:8")
    cluster.wait_state(fill, "RUNNING")
    job = cluster.sbatch("-p", "npu", "--gres=npu:4")
    backend = make_backend(cluster)
    backend.snapshot()
    assert apply(backend, Decision(order=(), holds=(job,))).holds == 1
    assert cluster.field(job, "%Q") == "0" and cluster.field(job, "%r") == "JobHeldAdmin"
    assert admin_comment(cluster, job) == "asrpt[held]:"
    # a restarted daemon knows the hold is its own and releases it
    fresh = make_backend(cluster)
    assert job in {j.job_id for j in fresh.snapshot().pending}
    report = apply(fresh, Decision(order=(job,)))
    assert report.releases == 1 and report.priorities == 1 and report.failures == []
    assert int(cluster.field(job, "%Q")) > PRIORITY_AUTO_MAX and cluster.field(job, "%r") != "JobHeldAdmin"
    assert admin_comment(cluster, job) == ""


def test_users_hold_is_left_alone(cluster):
    job = cluster.sbatch("--hold", "--gres=gpu:1")
    backend = make_backend(cluster)
    backend.snapshot()
    report = apply(backend, Decision(order=(job,)))
    assert report.calls == 0 and cluster.field(job, "%r") == "JobHeldUser"


def test_admin_comment_and_only_changes_are_written(cluster):
    fill = cluster.sbatch("-p", "npu", "--gres=npu:8")
    cluster.wait_state(fill, "RUNNING")
    jobs = [cluster.sbatch("-p", "npu", "--gres=npu:4") for _ in range(3)]
    runner = SlurmRunner(slurm_conf=cluster.slurm_conf)
    backend = SlurmCliBackend(load_config(cluster), runner=runner)
    backend.snapshot()
    texts = {jobs[0]: "ETA start 12:00", jobs[1]: "ETA start 12:30"}
    apply(backend, Decision(order=tuple(jobs)), admin_comments=texts)
    assert runner.counts["scontrol update"] == 3
    assert admin_comment(cluster, jobs[0]) == "asrpt: ETA start 12:00"
    assert "AdminComment=asrpt: ETA start 12:30" in cluster.run("scontrol", "show", "job", jobs[1]).stdout

    backend.snapshot()
    apply(backend, Decision(order=tuple(jobs)), admin_comments=texts)
    assert runner.counts["scontrol update"] == 3  # nothing changed, nothing written

    new = cluster.sbatch("-p", "npu", "--gres=npu:4")
    backend.snapshot()
    report = apply(backend, Decision(order=(jobs[0], new, jobs[1], jobs[2])), admin_comments=texts)
    assert report.calls == 1 and runner.counts["scontrol update"] == 4  # the new job only
    values = [int(cluster.field(j, "%Q")) for j in (jobs[0], new, jobs[1], jobs[2])]
    assert values == sorted(values, reverse=True)


def test_finished_jobs_from_the_completion_log(cluster):
    since = time.time() - 1
    ok = cluster.sbatch("-J", "finishes", wrap="sleep 1")
    bad = cluster.sbatch("-J", "fails", "--gres=gpu:a100:1", wrap="exit 3")
    running = cluster.sbatch("-J", "still running")
    cluster.wait_state(ok, "COMPLETED")
    cluster.wait_state(bad, "FAILED")
    cluster.wait_state(running, "RUNNING")
    found = {r.job_id: r for r in make_backend(cluster).finished_jobs(since)}
    assert found[ok].state == "COMPLETED" and found[ok].exit_code == 0 and found[ok].user == "root"
    assert found[ok].ran and 0.5 <= found[ok].runtime_s <= 10 and found[ok].nodes[0].startswith("node")
    assert found[bad].state == "FAILED" and found[bad].exit_code == 3
    assert running not in found


def test_a_newline_in_a_job_name_forges_no_completion_record(cluster):
    """Issue 16: ``-J $'x\\nJobId=<her job> ...'`` made the real jobcomp/filetxt line of a long
    job read as another job's record."""
    since = time.time() - 1
    short = cluster.sbatch("-J", "short", wrap="sleep 1")
    cluster.wait_state(short, "COMPLETED")
    forger = cluster.sbatch("-J", f"x\nJobId={short} UserId=root(0) GroupId=root(0) Name=short", wrap="sleep 4")
    odd = cluster.sbatch("-J", "a\nb", wrap="true")
    cluster.wait_state(forger, "COMPLETED")
    cluster.wait_state(odd, "COMPLETED")
    cluster.wait_for("the job completion log", lambda: f"JobId={forger} " in Path(cluster.jobcomp_log).read_text())
    found = {r.job_id: r for r in make_backend(cluster).finished_jobs(since)}
    assert found[short].runtime_s is not None and found[short].runtime_s < 3  # not the forger's 4 s
    assert forger not in found  # its lines are ambiguous: not trusted
    assert found[odd].name == "a\nb"


def test_unreachable_when_slurmctld_is_down(cluster):
    job = cluster.sbatch("-J", "survives", "--gres=gpu:1")
    cluster.wait_state(job, "RUNNING")
    backend = make_backend(cluster, timeout_s=4.0)
    before = backend.snapshot()
    assert job in {r.job.job_id for r in before.running}
    since = time.time() - 5
    cluster.slurmctld("stop")
    try:
        with pytest.raises(SlurmUnreachable):
            backend.snapshot()
        assert job in backend.jobs  # the previous view is kept
        assert job not in {r.job_id for r in backend.finished_jobs(since)}
        with pytest.raises(SlurmUnreachable):
            apply(backend, Decision(order=(), holds=(job,)), admin_comments={job: "x"})
    finally:
        cluster.slurmctld("start")
    after = backend.snapshot()
    assert job in {r.job.job_id for r in after.running}
