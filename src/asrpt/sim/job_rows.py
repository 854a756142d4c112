"""Per-job outcome rows (``asrpt simulate --jobs OUT.csv``): one row per job and policy.

Everything comes from the cluster's ``JobRecord`` s: first start, end, partitions and the node
count of the first run (also for jobs Slurm started on its own, ``sim/slurmctld.py``).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from asrpt.sim.engine import SimResult

#: Columns of the per-job CSV, in order.
JOB_COLUMNS: tuple[str, ...] = (
    "policy", "seed", "job_id", "submit_s", "start_s", "end_s", "wait_s", "jct_s",
    "partition", "nodes", "accelerators", "preemptions",
)


def job_rows(result: SimResult, *, seed: int) -> list[dict[str, Any]]:
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
            "nodes": record.first_nodes,
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
