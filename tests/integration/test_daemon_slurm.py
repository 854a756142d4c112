"""asrptd's cycle against the real local Slurm: it orders the queue by predicted work, pins
and starts jobs through Slurm, writes ETAs, survives a restart with its state, and changes
nothing while slurmctld is down."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from asrpt.daemon.config import load_config
from asrpt.daemon.service import Daemon
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.slurm.parsing import parse_squeue_json

from .conftest import LocalCluster

pytestmark = pytest.mark.slurm


def _daemon(cluster: LocalCluster, tmp_path: Path, **scheduler) -> Daemon:
    config = load_config(cluster.dir / "asrpt.toml", environ={})
    config = dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, **scheduler))
    url = f"sqlite:///{tmp_path}/asrpt.db"
    config = dataclasses.replace(
        config,
        database=dataclasses.replace(config.database, url=url),
        spool=dataclasses.replace(config.spool, dir=str(tmp_path / "spool")),
    )
    upgrade(url)
    return Daemon(config, repository=HistoryRepository.from_url(url))


def _jobs(cluster: LocalCluster):
    return {j.job_id: j for j in parse_squeue_json(cluster.run("squeue", "--json").stdout)[1]}


def test_cycle_orders_by_predicted_work_and_slurm_follows(cluster, tmp_path):
    daemon = _daemon(cluster, tmp_path)
    # Fill both a100 nodes so the queue forms.
    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8", wrap="sleep 300") for node in ("node1", "node2")]
    for job_id in fillers:
        cluster.wait_state(job_id, "RUNNING")
    long_job = cluster.sbatch("-p", "a100", "--gres=gpu:a100:8", "-J", "long", wrap="sleep 30")
    short_job = cluster.sbatch("-p", "a100", "--gres=gpu:a100:8", "-J", "short", wrap="sleep 30")
    # The history says the later job is much shorter (as the predictor would after training).
    for job_id, iterations in ((long_job, 1e6), (short_job, 10.0)):
        daemon.repository.record_submission(
            SubmissionRecord(slurm_job_id=job_id, user="root", submit_time_s=0.0, source="wrapper", iterations_hint=iterations)
        )
        daemon.repository.record_prediction(job_id, predicted_iterations=iterations, model_version="test", made_at_s=0.0)

    decision = daemon.cycle()
    assert decision is not None
    assert decision.order.index(short_job) < decision.order.index(long_job)
    jobs = _jobs(cluster)
    assert jobs[short_job].priority > jobs[long_job].priority > 4294901759
    assert "eta start" in jobs[short_job].admin_comment
    # The same forecast is stored for `asrpt queue/eta/explain`, in the policy's order.
    stored = {f.slurm_job_id: f for f in daemon.repository.latest_forecasts()}
    assert stored[short_job].position < stored[long_job].position
    assert stored[short_job].job_name == "short" and stored[fillers[0]].running
    assert daemon.repository.load_state("policy:asrpt") is not None

    # Free one node: Slurm must start the short job first, even though it was submitted later.
    cluster.run("scancel", fillers[0])
    cluster.wait_for("a node to free", lambda: _jobs(cluster)[fillers[0]].state != "RUNNING" if fillers[0] in _jobs(cluster) else True)
    for _ in range(20):
        daemon.cycle()
        if _jobs(cluster)[short_job].state == "RUNNING":
            break
    cluster.wait_state(short_job, "RUNNING", timeout=20)
    assert _jobs(cluster)[long_job].state == "PENDING"

    # A restarted daemon continues from the stored state and keeps the order.
    again = _daemon(cluster, tmp_path)
    assert again.loop.state.to_dict()["queue"] == daemon.loop.state.to_dict()["queue"]
    assert again.cycle() is not None


def test_a_down_controller_changes_nothing(cluster, tmp_path):
    daemon = _daemon(cluster, tmp_path)
    job = cluster.sbatch("-p", "v100", "--gres=gpu:v100:1", wrap="sleep 120")
    assert daemon.cycle() is not None
    saved = daemon.repository.load_state("policy:asrpt")
    cluster.slurmctld("stop")
    try:
        assert daemon.cycle() is None
        assert daemon.stats.consecutive_failures == 1
        assert daemon.repository.load_state("policy:asrpt") == saved
        assert daemon.sync_finished() == 0
        assert daemon.repository.history_rows(finished_only=True) == []
    finally:
        cluster.slurmctld("start")
    assert daemon.cycle() is not None and job in _jobs(cluster)


def test_finished_jobs_become_outcomes(cluster, tmp_path):
    daemon = _daemon(cluster, tmp_path)
    job = cluster.sbatch("-p", "v100", "--gres=gpu:v100:1", wrap="sleep 1")
    daemon.cycle()
    cluster.wait_for("the job to finish", lambda: job not in _jobs(cluster) or _jobs(cluster)[job].state == "COMPLETED")
    cluster.wait_for("the job completion log", lambda: Path(cluster.jobcomp_log).exists() and f"JobId={job} " in Path(cluster.jobcomp_log).read_text())
    assert daemon.sync_finished() >= 1
    rows = {r.job_id: r for r in daemon.repository.history_rows(finished_only=True)}
    assert rows[job].end_time_s is not None and rows[job].iterations is not None and rows[job].iterations > 0


def test_asrptd_once_runs_a_cycle_as_a_process(cluster, tmp_path):
    config = (cluster.dir / "asrpt.toml").read_text().replace(f"sqlite:///{cluster.dir}/asrpt.db", f"sqlite:///{tmp_path}/d.db")
    path = tmp_path / "asrpt.toml"
    path.write_text(config)
    cluster.sbatch("-p", "npu", "--gres=npu:2", wrap="sleep 30")
    result = subprocess.run(
        [str(Path(sys.executable).with_name("asrptd")), "--config", str(path), "--once"],
        capture_output=True, text=True, env=cluster.env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\nintervall_s = 3\n")
    result = subprocess.run([str(Path(sys.executable).with_name("asrptd")), "--config", str(bad), "--once"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unknown key 'intervall_s'" in result.stderr


def test_dry_run_reads_and_decides_but_writes_nothing(cluster, tmp_path):
    config = load_config(cluster.dir / "asrpt.toml", environ={})
    url = f"sqlite:///{tmp_path}/dry.db"
    config = dataclasses.replace(config, database=dataclasses.replace(config.database, url=url))
    upgrade(url)
    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8", wrap="sleep 120") for node in ("node1", "node2")]
    for job_id in fillers:
        cluster.wait_state(job_id, "RUNNING")
    waiting = [cluster.sbatch("-p", "a100", "--gres=gpu:a100:4", wrap="sleep 30") for _ in range(3)]
    before = {j: (_jobs(cluster)[j].priority, _jobs(cluster)[j].admin_comment) for j in waiting}
    daemon = Daemon(config, repository=HistoryRepository.from_url(url), dry_run=True)
    decision = daemon.cycle()
    assert decision is not None and set(waiting) <= set(decision.order)
    assert daemon.backend.runner.suppressed, "a dry run still computes the writes it would make"
    assert {j: (_jobs(cluster)[j].priority, _jobs(cluster)[j].admin_comment) for j in waiting} == before


def _held_tp8(cluster, tmp_path):
    """A daemon, both a100 nodes half busy and an 8-way TP job it holds: only a split placement
    is free, so the job is communication-heavy (no release gating, a long hold budget, so the
    test does not race the virtual clock). Returns (daemon, fillers, tp8) after the hold."""
    daemon = _daemon(cluster, tmp_path, queue_order="remaining", comm_heavy_tau=1.0)
    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:4", wrap="sleep 300") for node in ("node1", "node2")]
    for job_id in fillers:
        cluster.wait_state(job_id, "RUNNING")
    tp8 = cluster.sbatch("-p", "a100", "--gpus=8", "--comment", "asrpt:tp=8,class=resnet50", wrap="sleep 5")
    daemon.repository.record_submission(SubmissionRecord(slurm_job_id=tp8, user="root", submit_time_s=0.0, source="wrapper"))
    daemon.repository.record_prediction(tp8, predicted_iterations=1e6, model_version="test", made_at_s=0.0)
    decision = daemon.cycle()
    assert decision is not None and tp8 in decision.holds
    assert "communication-heavy" in decision.reasons[tp8]
    cluster.wait_for("the hold", lambda: _jobs(cluster)[tp8].is_held)
    return daemon, fillers, tp8


def test_a_communication_heavy_job_is_held_then_released_onto_one_node(cluster, tmp_path):
    """8-way tensor parallelism split 4+4 over two nodes is many times slower than on one node:
    the daemon holds it in Slurm rather than start it split, and releases it, pinned to the
    node that has become free, once it can run consolidated."""
    daemon, fillers, tp8 = _held_tp8(cluster, tmp_path)

    cluster.run("scancel", fillers[1])
    cluster.wait_for("node2 to free", lambda: fillers[1] not in _jobs(cluster) or _jobs(cluster)[fillers[1]].state != "RUNNING")
    for _ in range(20):
        decision = daemon.cycle()
        if decision is not None and any(p.job_id == tp8 for p in decision.starts):
            break
    assert decision is not None and [p.worker_nodes for p in decision.starts if p.job_id == tp8] == [("node2",) * 8]
    cluster.wait_state(tp8, "RUNNING", "COMPLETED", timeout=30)
    assert _jobs(cluster)[tp8].nodes == ("node2",)


def test_an_unknown_workload_class_is_scheduled_as_an_ordinary_job(cluster, tmp_path):
    """Issue 16 on real Slurm: ``--comment asrpt:class=bert2`` (and a wrapper-recorded
    ``#ASRPT class=zzz``) used to raise KeyError in every cycle; asrptd --once exited 1."""
    config = (cluster.dir / "asrpt.toml").read_text().replace(f"sqlite:///{cluster.dir}/asrpt.db", f"sqlite:///{tmp_path}/d.db")
    path = tmp_path / "asrpt.toml"
    path.write_text(config)
    job = cluster.sbatch("-p", "v100", "--gres=gpu:v100:1", "--comment", "asrpt:class=bert2", wrap="sleep 30")
    result = subprocess.run(
        [str(Path(sys.executable).with_name("asrptd")), "--config", str(path), "--once"],
        capture_output=True, text=True, env=cluster.env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"job {job}: workload class 'bert2' is unknown" in result.stderr


def test_a_stopping_daemon_releases_the_jobs_it_held(cluster, tmp_path):
    """Issue 16: a job asrpt held for a consolidated placement must not stay held once asrptd
    is stopped (nothing else would ever release it)."""
    daemon, _fillers, tp8 = _held_tp8(cluster, tmp_path)
    assert daemon.release_holds() == 1
    cluster.wait_for("the release", lambda: not _jobs(cluster)[tp8].is_held)
    assert "held" not in _jobs(cluster)[tp8].admin_comment.split("asrpt")[-1].split(":")[0]


def test_asrpt_preempt_requeues_a_long_requeueable_job_for_a_short_one(cluster, tmp_path):
    """Both a100 nodes hold a long job (predicted 10^6 iterations), one submitted with
    --requeue, one with --no-requeue; a short 8-GPU job (10 iterations) arrives. asrpt-preempt
    requeues the requeueable one only (scontrol requeue), and Slurm starts the short job on
    the node it freed; the other long job keeps running."""
    daemon = _daemon(cluster, tmp_path, preempt_exempt_s=0.0)
    config = dataclasses.replace(daemon.config, daemon=dataclasses.replace(daemon.config.daemon, policy="asrpt-preempt"))
    daemon = Daemon(config, repository=daemon.repository)
    assert daemon.policy.name == "asrpt-preempt"
    restartable = cluster.sbatch("-p", "a100", "-w", "node1", "--gres=gpu:a100:8", "--requeue", "-J", "long-ckpt", wrap="sleep 300")
    pinned = cluster.sbatch("-p", "a100", "-w", "node2", "--gres=gpu:a100:8", "--no-requeue", "-J", "long", wrap="sleep 300")
    for job_id in (restartable, pinned):
        cluster.wait_state(job_id, "RUNNING")
    short_job = cluster.sbatch("-p", "a100", "--gres=gpu:a100:8", "-J", "short", wrap="sleep 30")
    for job_id, iterations in ((restartable, 1e6), (pinned, 1e6), (short_job, 10.0)):
        daemon.repository.record_submission(SubmissionRecord(slurm_job_id=job_id, user="root", submit_time_s=0.0, source="wrapper"))
        daemon.repository.record_prediction(job_id, predicted_iterations=iterations, model_version="test", made_at_s=0.0)

    requeued = False
    for _ in range(10):
        decision = daemon.cycle()
        assert decision is not None
        requeued = requeued or daemon.backend.last_apply.requeues > 0
        if _jobs(cluster)[short_job].state == "RUNNING":
            break
    assert requeued
    cluster.wait_state(short_job, "RUNNING", timeout=30)
    jobs = _jobs(cluster)
    assert jobs[short_job].nodes == ("node1",)
    assert jobs[restartable].state == "PENDING"  # back in the queue, to restart from its checkpoint
    assert jobs[pinned].state == "RUNNING"
    assert "Restarts=1" in cluster.run("scontrol", "show", "job", restartable).stdout


def test_each_task_of_a_pending_job_array_is_a_job_of_its_own(cluster, tmp_path):
    """squeue shows a pending array as one record (``1_[2-9]``); asrpt predicts, orders and
    forecasts each task, and Slurm then carries one priority per task in asrpt's order."""
    daemon = _daemon(cluster, tmp_path)
    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8", wrap="sleep 300") for node in ("node1", "node2")]
    for job_id in fillers:
        cluster.wait_state(job_id, "RUNNING")
    array = cluster.sbatch("-p", "a100", "--gres=gpu:a100:8", "--array=0-9", "-J", "sweep", wrap="sleep 30")
    tasks = [f"{array}_{task}" for task in range(10)]
    # The wrapper records the id sbatch printed: every task inherits what it says.
    daemon.repository.record_submission(
        SubmissionRecord(slurm_job_id=array, user="root", submit_time_s=0.0, source="wrapper", iterations_hint=50.0)
    )

    decision = daemon.cycle()
    assert decision is not None
    assert [j for j in decision.order if j.startswith(f"{array}_")] == tasks  # same work: task order
    assert set(daemon.repository.latest_predictions(tasks)) == set(tasks)
    assert all(daemon.repository.get_submission(t).iterations_hint == 50.0 for t in tasks)
    stored = {f.slurm_job_id: f for f in daemon.repository.latest_forecasts()}
    assert [stored[t].position for t in tasks] == sorted(stored[t].position for t in tasks)
    jobs = _jobs(cluster)
    priorities = [jobs[t].priority for t in tasks]
    assert all(p > 4294901759 for p in priorities) and priorities == sorted(priorities, reverse=True)
    assert all("eta start" in jobs[t].admin_comment for t in tasks)
    # A second cycle with nothing changed writes nothing (the tasks keep their identity).
    daemon.cycle()
    assert daemon.backend.last_apply.priorities == 0


def test_finished_array_tasks_become_outcomes_of_their_own(cluster, tmp_path):
    """The job completion log names a task by its own job id plus ArrayJobId/ArrayTaskId;
    each task's outcome lands on its own history row, ``<array>_<task>``."""
    daemon = _daemon(cluster, tmp_path)
    array = cluster.sbatch("-p", "v100", "--gres=gpu:v100:1", "--array=0-1", wrap="sleep 1")
    daemon.cycle()
    tasks = [f"{array}_0", f"{array}_1"]
    log = Path(cluster.jobcomp_log)
    cluster.wait_for("both tasks in the job completion log",
                     lambda: log.exists() and log.read_text().count(f"ArrayJobId={array} ") == 2, timeout=40)
    assert daemon.sync_finished() >= 2
    rows = {r.job_id: r for r in daemon.repository.history_rows(finished_only=True)}
    assert all(rows[t].end_time_s is not None for t in tasks)


def test_a_daemon_that_cannot_start_releases_what_an_earlier_run_held(cluster, tmp_path):
    """Issue 16: a daemon killed with jobs held, whose restart then fails (its history is
    unusable), left those jobs held for good. The failed start now releases them: that needs
    only Slurm."""
    _daemon_that_held, _fillers, tp8 = _held_tp8(cluster, tmp_path)  # killed: no release on stop
    database = tmp_path / "asrpt.db"
    database.write_bytes(b"this is not a database" * 100)
    config = (cluster.dir / "asrpt.toml").read_text().replace(f"sqlite:///{cluster.dir}/asrpt.db", f"sqlite:///{database}")
    path = tmp_path / "asrpt.toml"
    path.write_text(config)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("asrptd")), "--config", str(path), "--once"],
        capture_output=True, text=True, env=cluster.env, timeout=120,
    )
    assert result.returncode == 2 and "not a SQLite database or is damaged" in result.stderr, result.stderr
    assert "released 1 job(s)" in result.stderr
    cluster.wait_for("the release", lambda: not _jobs(cluster)[tp8].is_held)
