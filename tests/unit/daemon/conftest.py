"""A daemon on a fake Slurm backend and a real SQLite history, for tests of what a cycle leaves
behind (forecast rows, the HTTP endpoint) without a Slurm test-bed."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from asrpt.core.model import ClusterSnapshot, Decision, Placement, RunningJob
from asrpt.daemon.config import DaemonConfig, SpoolSection
from asrpt.daemon.service import Daemon
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.slurm.cli_backend import SlurmBackendConfig
from asrpt.slurm.records import SlurmJob
from tests.helpers import flat_job, flat_speed_table, partition_nodes

NOW_S = 1_750_000_000.0


class ManualClock:
    def __init__(self, t_s: float) -> None:
        self.t_s = t_s

    def now_s(self) -> float:
        return self.t_s


class FakeSlurm:
    """Hands out one snapshot and records what the daemon applies; like the CLI backend, it
    asks the daemon for every active job's AdminComment text."""

    def __init__(self, snapshot: ClusterSnapshot, jobs: dict[str, SlurmJob]) -> None:
        self._snapshot = snapshot
        self.jobs = jobs
        self.last_apply = SimpleNamespace(calls=0)
        self.admin_comment = None
        self.comments: dict[str, str | None] = {}

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def apply(self, decision: Decision) -> None:
        self.last_apply = SimpleNamespace(calls=2)
        if self.admin_comment is not None:
            self.comments = {job_id: self.admin_comment(job_id, decision) for job_id in self.jobs}


def _cluster() -> tuple[ClusterSnapshot, dict[str, SlurmJob]]:
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=4)
    running_job = flat_job("100", 4, 1000.0, submit_s=NOW_S - 500, user="bob")
    running = RunningJob(
        job=running_job,
        placement=Placement(job_id="100", partition="gpu", worker_nodes=(nodes[0].name,) * 4, iteration_time_s=1.0),
        start_time_s=NOW_S - 100,
    )
    nodes = (dataclasses.replace(nodes[0], accelerators_free=0), nodes[1])
    pending = (
        flat_job("101", 8, 300.0, submit_s=NOW_S - 50, user="alice", time_limit_s=900.0),
        flat_job("102", 4, 2000.0, submit_s=NOW_S - 40, user="carol", time_limit_s=3000.0),
        flat_job("103", 2, 50.0, submit_s=NOW_S - 30, user="alice", time_limit_s=120.0),
    )
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=pending, running=(running,))
    jobs = {
        job_id: SlurmJob(job_id=job_id, state=state, user=user, name=name, partitions=("gpu",))
        for job_id, state, user, name in (
            ("100", "RUNNING", "bob", "bert-large"),
            ("101", "PENDING", "alice", "resnet-8"),
            ("102", "PENDING", "carol", "llm-long"),
            ("103", "PENDING", "alice", "tiny"),
        )
    }
    return snapshot, jobs


@pytest.fixture
def daemon(tmp_path) -> Daemon:
    """A daemon that has seen the fake cluster: predictions stored, no cycle run yet."""
    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    snapshot, jobs = _cluster()
    predicted = {"100": 1000.0, "101": 300.0, "102": 2000.0, "103": 50.0}
    for job in (*snapshot.pending, *(r.job for r in snapshot.running)):
        repository.record_submission(
            SubmissionRecord(slurm_job_id=job.job_id, user=job.user, submit_time_s=job.submit_time_s, source="slurm", recurrence_group="g")
        )
        repository.record_prediction(job.job_id, predicted_iterations=predicted[job.job_id], model_version="test", made_at_s=NOW_S - 60)
    spool = tmp_path / "spool"
    spool.mkdir()
    slurm_conf = tmp_path / "slurm.conf"  # Slurm's default: PrivateData unset
    slurm_conf.write_text("ClusterName=test\nSlurmUser=root\n")
    config = DaemonConfig(spool=SpoolSection(dir=str(spool)), slurm=SlurmBackendConfig(slurm_conf=str(slurm_conf)))
    backend = FakeSlurm(snapshot, jobs)
    made = Daemon(config, repository=repository, backend=backend, clock=ManualClock(NOW_S), speed=flat_speed_table())  # type: ignore[arg-type]
    backend.admin_comment = made._admin_comment
    yield made
    repository.close()
