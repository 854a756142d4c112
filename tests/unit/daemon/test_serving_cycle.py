"""A daemon cycle on a fake Slurm and a real SQLite history: a serving job is restricted to
its plan's partition and TP degree; an ordinary job and a serving job of an unplanned model
are scheduled as before."""

from __future__ import annotations

import json
import logging

from asrpt.core.model import ClusterSnapshot
from asrpt.core.speed import SpeedTable, WorkloadProfile
from asrpt.daemon.config import DaemonConfig, PartitionSection, ServingSection, SpoolSection
from asrpt.daemon.service import Daemon
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.slurm.records import SlurmJob
from tests.helpers import flat_job, partition_nodes

from .conftest import NOW_S, FakeSlurm, ManualClock
from .test_serving import machine, plan_document


def _speed() -> SpeedTable:
    """The v100 is twice as fast as the a100 for the (non-communicating) class: without a
    plan, the policy would put every job there."""
    return SpeedTable(
        workload_classes=["flat"],
        accelerators=["a100", "v100"],
        step_time_s=[[1.0, 0.5]],
        profiles={"flat": WorkloadProfile(name="flat", params_gb=0.0, activation_gb_per_microbatch=0.0, tp_allreduce_gb_per_microbatch=0.0)},
    )


def test_a_serving_job_is_placed_on_its_plans_partition_with_its_tp(tmp_path, caplog) -> None:
    plan = tmp_path / "llama2-7b.json"
    plan.write_text(json.dumps(plan_document(machines=[
        machine("a100-80gb", 8, [(2, 8000.0), (1, 7200.0), (4, 6000.0)]),  # 1000 tok/s per accelerator at TP 2
        machine("v100-32gb", 8, [(4, 1200.0), (8, 900.0)], infeasible=(1, 2)),  # 150
    ])))  # fmt: skip
    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    a100, a100_nodes = partition_nodes("a100", "a100", count=2, per_node=8)
    v100, v100_nodes = partition_nodes("v100", "v100", count=2, per_node=8)
    both = {"allowed_partitions": ("a100", "v100"), "allowed_accelerators": ("a100", "v100")}
    pending = (
        flat_job("201", 4, 100.0, submit_s=NOW_S - 30, user="alice", **both),  # serve-model=llama-2-7b tp=auto
        flat_job("202", 4, 100.0, submit_s=NOW_S - 20, user="bob", **both),  # an ordinary job
        flat_job("203", 4, 100.0, submit_s=NOW_S - 10, user="carol", **both),  # serve-model=mistral-7b (no plan)
    )
    snapshot = ClusterSnapshot(partitions=(a100, v100), nodes=(*a100_nodes, *v100_nodes), pending=pending)
    jobs = {
        j.job_id: SlurmJob(job_id=j.job_id, state="PENDING", user=j.user, name=f"job{j.job_id}", partitions=("a100", "v100"))
        for j in pending
    }
    # What the wrappers recorded (the daemon adds Slurm's view in its cycle).
    for job_id, user, model in (("201", "alice", "llama-2-7b"), ("203", "carol", "mistral-7b")):
        repository.record_submission(SubmissionRecord(
            slurm_job_id=job_id, user=user, submit_time_s=NOW_S - 30, source="wrapper",
            serve_model=model, parallel_tensor_auto=True, recurrence_group="c" * 64,
        ))  # fmt: skip
    repository.record_submission(SubmissionRecord(slurm_job_id="202", user="bob", submit_time_s=NOW_S - 20, source="slurm"))
    for job in pending:
        repository.record_prediction(job.job_id, predicted_iterations=100.0, model_version="test", made_at_s=NOW_S - 60)
    config = DaemonConfig(
        spool=SpoolSection(dir=str(tmp_path / "spool")),
        serving=ServingSection(plan=(str(plan),)),
        partitions=(PartitionSection(name="a100", accelerator="a100"), PartitionSection(name="v100", accelerator="v100")),
    )
    (tmp_path / "spool").mkdir()
    backend = FakeSlurm(snapshot, jobs)
    daemon = Daemon(config, repository=repository, backend=backend, clock=ManualClock(NOW_S), speed=_speed())  # type: ignore[arg-type]
    backend.admin_comment = daemon._admin_comment
    try:
        with caplog.at_level(logging.WARNING, logger="asrpt.daemon.serving"):
            decision = daemon.cycle()
        assert decision is not None
        decided = daemon.loop.last_snapshot
        assert decided is not None
        by_id = {j.job_id: j for j in decided.pending}
        served = by_id["201"]
        assert (served.allowed_partitions, served.allowed_accelerators) == (("a100",), ("a100",))
        assert (served.accelerators, served.parallel.data, served.parallel.tensor) == (4, 2, 2)
        assert by_id["202"].allowed_partitions == by_id["203"].allowed_partitions == ("a100", "v100")

        starts = {p.job_id: p for p in decision.starts}
        assert starts["201"].partition == "a100" and len(starts["201"].worker_nodes) == 4
        assert starts["202"].partition == "v100"  # the faster type, as without serving plans
        assert starts["203"].partition == "v100"

        [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warning.startswith("job 203 (serve-model=mistral-7b): no serving plan covers it")

        assert backend.comments["201"].endswith("serve tp=2")
        assert "serve tp" not in (backend.comments["202"] or "")
        rows = {f.slurm_job_id: f for f in repository.latest_forecasts()}
        assert "serving llama2-7b: partition a100" in (rows["201"].reason or "")
        assert "ordinary job" in (rows["203"].reason or "")

        stored = repository.get_submission("201")
        assert stored is not None and stored.source == "slurm" and stored.accelerators == 4
        # Slurm's view did not turn the absent tp into an explicit tp=1, nor replace the group.
        assert (stored.serve_model, stored.parallel_tensor_auto, stored.parallel_tensor) == ("llama-2-7b", True, None)
        assert stored.recurrence_group == "c" * 64
    finally:
        repository.close()
