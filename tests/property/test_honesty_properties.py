"""Issue 16's honesty rules as invariants on random inputs: no forecast passes a time limit,
a job of unknown length is forecast only as its limit's bound, and an iteration hint never
earns more than its user's track record allows."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.core.model import ClusterSnapshot, Placement, RunningJob
from asrpt.core.policies import make_policy
from asrpt.predict.predictor import trusted_hint_log
from asrpt.sim.forecast import forecast
from tests.helpers import flat_job, flat_speed_table, partition_nodes

NOW_S = 10_000.0


@st.composite
def queues(draw):
    """One partition of 2 nodes x 2; some running jobs (started before now), pending jobs
    with random predictions (0: unknown), limits (some shorter than the prediction)."""
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=2)
    free = {n.name: n.accelerators_total for n in nodes}
    running = []
    for i in range(draw(st.integers(0, 3))):
        node = draw(st.sampled_from(sorted(free)))
        if free[node] == 0:
            continue
        free[node] -= 1
        predicted = draw(st.sampled_from([0.0, 50.0, 500.0, 5000.0]))
        limit = draw(st.one_of(st.none(), st.floats(600.0, 20_000.0)))
        started = NOW_S - draw(st.floats(0.0, 590.0))
        job = replace(flat_job(f"r{i}", 1, predicted or 1.0, submit_s=started - 1, time_limit_s=limit), predicted_iterations=predicted)
        running.append(RunningJob(job=job, placement=Placement(job_id=job.job_id, partition="gpu", worker_nodes=(node,), iteration_time_s=1.0), start_time_s=started))
    pending = []
    for i in range(draw(st.integers(1, 8))):
        predicted = draw(st.sampled_from([0.0, 10.0, 100.0, 1000.0, 10_000.0]))
        limit = draw(st.one_of(st.none(), st.floats(60.0, 5000.0)))
        job = flat_job(f"p{i}", draw(st.integers(1, 2)), predicted or 1.0, submit_s=NOW_S - 100 + i, time_limit_s=limit)
        pending.append(replace(job, predicted_iterations=predicted))
    nodes = tuple(replace(n, accelerators_free=free[n.name]) for n in nodes)
    return ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=tuple(pending), running=tuple(running))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=queues(), policy_name=st.sampled_from(["asrpt", "fifo", "spwf"]))
def test_no_forecast_passes_a_time_limit_and_unknown_lengths_are_bounds(snapshot, policy_name):
    policy = make_policy(policy_name, flat_speed_table())
    jobs = {j.job_id: j for j in (*snapshot.pending, *(r.job for r in snapshot.running))}
    predicted = forecast(snapshot, NOW_S, policy, policy.new_state().to_dict(),
                         lambda job: job.predicted_iterations or 3600.0)
    for job_id, f in predicted.items():
        job = jobs[job_id]
        if not math.isfinite(f.start_s):
            continue
        assert f.end_s >= NOW_S - 1e-6, job_id  # never an end in the past
        if job.time_limit_s is not None:
            assert f.end_s <= f.start_s + job.time_limit_s + 1e-6, job_id
        assert f.end_unknown == (not job.predicted_iterations)
        if f.end_unknown:
            assert f.end_s == (f.start_s + job.time_limit_s if job.time_limit_s else math.inf)


logs = st.floats(0.0, 20.0)


@given(without=logs, hint=logs, count=st.integers(0, 1000), more=st.integers(1, 100))
def test_a_hint_never_earns_more_than_its_track_record(without, hint, count, more):
    trusted = float(trusted_hint_log(np.array([without]), np.array([hint]), np.array([float(count)]))[0])
    better = float(trusted_hint_log(np.array([without]), np.array([hint]), np.array([float(count + more)]))[0])
    assert trusted >= min(without, hint) - 1e-12  # never below what the hint says, nor the estimate
    if hint >= without:
        assert trusted == hint  # claiming a longer run is taken at its word
    else:
        assert hint <= better <= trusted <= without  # a longer record earns more, never past the hint
        if count == 0:
            assert trusted == without  # no record, no credit
