"""Per-job outcome rows (``asrpt simulate --jobs OUT.csv``): one row per job and policy.

``JobRecord`` keeps when a job started and ended and on which partitions, but not on how many
nodes; that is only in the decisions. :class:`FirstPlacementRecorder` wraps a policy and notes,
for every job, the number of distinct nodes of its first placement, so the replay itself needs
no change and costs one dictionary lookup per started job.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from asrpt.core.model import ClusterSnapshot, Decision
from asrpt.core.policies.base import Policy, PolicyState
from asrpt.sim.engine import SimResult

#: Columns of the per-job CSV, in order.
JOB_COLUMNS: tuple[str, ...] = (
    "policy", "seed", "job_id", "submit_s", "start_s", "end_s", "wait_s", "jct_s",
    "partition", "nodes", "accelerators", "preemptions",
)


class FirstPlacementRecorder:
    """A policy that decides exactly as ``policy`` does and remembers each job's first node count."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.name = policy.name
        #: Job id -> distinct nodes of the job's first run.
        self.nodes_first_run: dict[str, int] = {}

    def new_state(self) -> PolicyState:
        return self._policy.new_state()

    def restore_state(self, data: dict[str, Any]) -> PolicyState:
        return self._policy.restore_state(data)

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: PolicyState) -> Decision:
        decision = self._policy.decide(snapshot, now_s, state)
        seen = self.nodes_first_run
        for placement in decision.starts:
            if placement.job_id not in seen:
                seen[placement.job_id] = len(placement.node_counts)
        return decision

    def __getattr__(self, name: str) -> Any:
        # Anything else a caller reads from a policy (options, speed table...) is the wrapped one's.
        return getattr(self._policy, name)


def job_rows(result: SimResult, nodes_first_run: dict[str, int], *, seed: int) -> list[dict[str, Any]]:
    """One row per job of ``result`` (columns :data:`JOB_COLUMNS`), in submission order.

    Raises ``ValueError`` for a job that never started or never ended: its row would be a lie,
    and :func:`asrpt.sim.metrics.policy_metrics` rejects such a replay too.
    """
    rows: list[dict[str, Any]] = []
    records = sorted(result.records.values(), key=lambda r: (r.job.submit_time_s, r.job.job_id))
    for record in records:
        job = record.job
        if record.first_start_s is None or record.end_s is None or not record.partitions:
            raise ValueError(f"{result.policy}: job {job.job_id} has no complete run (start {record.first_start_s}, end {record.end_s})")
        # The record knows every first run, also those Slurm started on its own (sim/slurmctld.py).
        first_nodes = record.first_nodes if record.first_nodes is not None else nodes_first_run.get(job.job_id)
        if first_nodes is None:
            raise ValueError(f"{result.policy}: no placement was recorded for job {job.job_id}; wrap the policy in FirstPlacementRecorder")
        rows.append({
            "policy": result.policy,
            "seed": seed,
            "job_id": job.job_id,
            "submit_s": job.submit_time_s,
            "start_s": record.first_start_s,
            "end_s": record.end_s,
            "wait_s": record.first_start_s - job.submit_time_s,
            "jct_s": record.end_s - job.submit_time_s,
            "partition": record.partitions[0],
            "nodes": first_nodes,
            "accelerators": job.accelerators,
            "preemptions": record.preemptions,
        })
    return rows


def write_jobs_csv(path: Path, rows: Iterable[dict[str, Any]], *, columns: Sequence[str] = JOB_COLUMNS) -> int:
    """Write ``rows`` as CSV with a header; returns the number of rows. Times keep 3 decimals."""
    count = 0
    with Path(path).open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(columns), extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
            count += 1
    return count


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else str(value)
    return value
