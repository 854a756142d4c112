"""What a replay is judged by: job completion times, queueing, utilisation, the lower bound."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from asrpt.core.model import Job, Node, Partition
from asrpt.core.placement import PlacementMemo, alpha_min_s
from asrpt.core.speed import SpeedTable
from asrpt.core.srpt import srpt_lower_bound_total_jct_s, virtual_size_s
from asrpt.sim.engine import SimResult


class JobLost(AssertionError):
    """A submitted job never finished, or finished twice: the replay is not trustworthy."""


def policy_metrics(result: SimResult) -> dict[str, float]:
    """The JSON block ``asrpt simulate`` writes for one policy."""
    records = list(result.records.values())
    unfinished = [r.job.job_id for r in records if r.end_s is None or r.first_start_s is None]
    if unfinished:
        raise JobLost(f"{result.policy}: {len(unfinished)} job(s) never finished: {unfinished[:10]}")
    jct = np.array([r.end_s - r.job.submit_time_s for r in records], dtype=float)
    queue = np.array([r.first_start_s - r.job.submit_time_s for r in records], dtype=float)
    first_submit_s = min(r.job.submit_time_s for r in records)
    makespan_s = max(r.end_s for r in records) - first_submit_s
    busy_s = sum(r.service_s for r in records)
    return {
        "total_jct_s": float(jct.sum()),
        "avg_jct_s": float(jct.mean()),
        "p50_jct_s": float(np.percentile(jct, 50)),
        "p99_jct_s": float(np.percentile(jct, 99)),
        "makespan_s": float(makespan_s),
        "avg_queue_s": float(queue.mean()),
        "max_queue_s": float(queue.max()),
        "utilization": float(busy_s / (result.accelerators_total * makespan_s)) if makespan_s > 0 else 0.0,
        "preemptions": float(sum(r.preemptions for r in records)),
    }


def jct_values_s(result: SimResult) -> list[float]:
    return [r.end_s - r.job.submit_time_s for r in result.records.values() if r.end_s is not None]


def lower_bound_total_jct_s(
    jobs: Sequence[Job], partitions: Sequence[Partition], nodes: Sequence[Node], speed: SpeedTable
) -> dict[str, float]:
    """Two valid lower bounds on total JCT with true sizes, and the larger of them.

    ``virtual_srpt_total_jct_s``: preemptive SRPT on the virtual machine of all G accelerators
    (the A-SRPT paper's relaxation). ``ideal_runtime_total_s``: every job alone on its best
    placement. Both bound any real schedule from below, so their maximum does too.
    """
    capacity = sum(n.accelerators_total for n in nodes)
    sized = []
    ideal_total_s = 0.0
    grouping = PlacementMemo()
    for job in jobs:
        ideal_s = alpha_min_s(job, partitions, nodes, speed, grouping)
        if math.isinf(ideal_s):
            continue
        n = float(job.true_iterations or 0.0)
        sized.append((job.job_id, job.submit_time_s, virtual_size_s(job.accelerators, n, ideal_s, capacity)))
        ideal_total_s += n * ideal_s
    srpt_s = srpt_lower_bound_total_jct_s(sized)
    return {
        "total_jct_s": max(srpt_s, ideal_total_s),
        "virtual_srpt_total_jct_s": srpt_s,
        "ideal_runtime_total_s": ideal_total_s,
    }
