"""Invariants every policy keeps on random workloads and random heterogeneous clusters.

SimCluster refuses oversubscription and partial gangs (it raises), so reaching the end of a
replay already proves those; the checks here add: every job finishes exactly once, never
before its ideal runtime allows (or its time limit, where Slurm kills it), never runs past its
time limit, and only on partitions it allows.
"""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.core.model import Job, Node, ParallelConfig, Partition
from asrpt.core.placement import alpha_min_s
from asrpt.core.policies import POLICIES, make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.engine import simulate
from asrpt.sim.metrics import policy_metrics
from asrpt.sim.predictors import GroupHistoryPredictions

SPEED = default_speed_table()
CLASSES = SPEED.workload_classes


@st.composite
def clusters(draw):
    partitions, nodes = [], []
    for index, accelerator in enumerate(draw(st.lists(st.sampled_from(["a100", "v100", "t4"]), min_size=1, max_size=3, unique=True))):
        name = f"p{index}"
        partitions.append(Partition(name=name, accelerator=accelerator))
        per_node = draw(st.sampled_from([2, 4, 8]))
        for n in range(draw(st.integers(1, 3))):
            nodes.append(Node(name=f"{name}-{n}", partition=name, accelerator=accelerator, accelerators_total=per_node, accelerators_free=per_node))
    return partitions, nodes


@st.composite
def workloads(draw, partitions):
    jobs = []
    names = [p.name for p in partitions]
    for i in range(draw(st.integers(1, 14))):
        d, p, t = draw(st.sampled_from([(1, 1, 1), (2, 1, 1), (1, 1, 2), (4, 1, 1), (2, 1, 2), (1, 2, 2), (2, 2, 1), (8, 1, 1)]))
        allowed = tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True)))
        iterations = draw(st.floats(1.0, 5000.0))
        predicted = draw(st.one_of(st.none(), st.floats(0.0, 5000.0)))
        jobs.append(
            Job(
                job_id=str(i),
                submit_time_s=draw(st.floats(0.0, 2000.0)),
                parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=2 if p > 1 else 1),
                workload_class=draw(st.sampled_from(CLASSES)),
                group=f"g{draw(st.integers(0, 3))}",
                user=f"u{draw(st.integers(0, 2))}",
                allowed_partitions=allowed,
                true_iterations=iterations,
                predicted_iterations=predicted,
                time_limit_s=draw(st.one_of(st.none(), st.floats(10.0, 1e6))),
            )
        )
    return jobs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy_name=st.sampled_from(sorted(POLICIES)))
def test_every_policy_keeps_the_invariants(data, policy_name):
    partitions, nodes = data.draw(clusters())
    jobs = [j for j in data.draw(workloads(partitions)) if not math.isinf(alpha_min_s(j, partitions, nodes, SPEED))]
    if not jobs:
        return
    result = simulate(jobs, partitions, nodes, make_policy(policy_name, SPEED), GroupHistoryPredictions())
    policy_metrics(result)  # raises JobLost if any job did not finish
    assert set(result.records) == {j.job_id for j in jobs}
    by_name = {p.name: p for p in partitions}
    for job in jobs:
        record = result.records[job.job_id]
        assert record.first_start_s >= job.submit_time_s
        ideal_s = job.true_iterations * alpha_min_s(job, partitions, nodes, SPEED)
        if job.time_limit_s is not None:
            ideal_s = min(ideal_s, job.time_limit_s)  # Slurm kills it at its limit
        assert record.end_s - job.submit_time_s >= ideal_s * (1 - 1e-9)
        if job.time_limit_s is not None and record.preemptions == 0:
            assert record.end_s - record.first_start_s <= job.time_limit_s * (1 + 1e-9)
        for name in record.partitions:
            assert job.allows(by_name[name])


def _schedule(result):
    return {k: (r.first_start_s, r.end_s, tuple(r.partitions), r.preemptions) for k, r in result.records.items()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), policy_name=st.sampled_from(sorted(POLICIES)))
def test_dispatch_memo_changes_no_schedule(data, policy_name, monkeypatch):
    """The policy's and the Slurm model's dispatch memos (remembered walks, reservations,
    expected ends, capacities) only save work: without any memo every job starts and ends
    exactly as before, on the same nodes."""
    import asrpt.sim.slurmctld as slurmctld_module

    partitions, nodes = data.draw(clusters())
    jobs = [j for j in data.draw(workloads(partitions)) if not math.isinf(alpha_min_s(j, partitions, nodes, SPEED))]
    if not jobs:
        return
    remembered = simulate(jobs, partitions, nodes, make_policy(policy_name, SPEED), GroupHistoryPredictions(), keep_events=True)
    forgetful = make_policy(policy_name, SPEED)
    forgetful.dispatch_memo = None
    with monkeypatch.context() as patched:
        patched.setattr(slurmctld_module, "DispatchMemo", lambda: None)
        recomputed = simulate(jobs, partitions, nodes, forgetful, GroupHistoryPredictions(), keep_events=True)
    assert _schedule(remembered) == _schedule(recomputed)
    assert remembered.events == recomputed.events
    assert remembered.decisions == recomputed.decisions


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    policy_name=st.sampled_from(["asrpt", "asrpt-strict", "asrpt-oracle", "fifo", "sjf-oracle", "spwf", "multifactor", "qssf", "tiresias"]),
)
def test_change_log_and_full_rescan_give_the_same_schedule(data, policy_name, monkeypatch):
    """A-SRPT and the fixed-key baselines update from the simulator's change log; handed plain
    tuples (as the daemon's Slurm backend does) they rescan the queue instead. Both must
    schedule identically."""
    import asrpt.sim.engine as engine_module
    from asrpt.sim.cluster import SimCluster

    class TupleSnapshots(SimCluster):
        def snapshot(self):
            return super().snapshot().frozen()

    partitions, nodes = data.draw(clusters())
    jobs = [j for j in data.draw(workloads(partitions)) if not math.isinf(alpha_min_s(j, partitions, nodes, SPEED))]
    if not jobs:
        return
    logged = simulate(jobs, partitions, nodes, make_policy(policy_name, SPEED), GroupHistoryPredictions())
    with monkeypatch.context() as patched:
        patched.setattr(engine_module, "SimCluster", TupleSnapshots)
        rescanned = simulate(jobs, partitions, nodes, make_policy(policy_name, SPEED), GroupHistoryPredictions())
    assert _schedule(logged) == _schedule(rescanned)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy_name=st.sampled_from(["multifactor", "qssf"]), max_age_s=st.sampled_from([50.0, 400.0, 1500.0, 7 * 86400.0]))
def test_kept_queues_schedule_as_a_full_sort_every_decision(data, policy_name, max_age_s):
    """Multifactor keeps its uncapped and capped jobs sorted and merges them by the current
    priority (also while jobs cross the age cap: ``max_age_s``); QSSF re-files only the jobs
    of a group or user whose history grew. Sorting every pending job by the policy's key at
    every decision must give the same schedule."""
    from asrpt.core.policies.baselines import MultifactorPolicy, QssfPolicy

    def build(static_key):
        if policy_name == "multifactor":
            policy = MultifactorPolicy(SPEED, max_age_s=max_age_s)
        else:
            policy = QssfPolicy(SPEED, default_runtime_s=max_age_s)
        policy.static_key = static_key
        return policy

    partitions, nodes = data.draw(clusters())
    jobs = [j for j in data.draw(workloads(partitions)) if not math.isinf(alpha_min_s(j, partitions, nodes, SPEED))]
    if not jobs:
        return
    kept = simulate(jobs, partitions, nodes, build(True), GroupHistoryPredictions())
    sorted_ = simulate(jobs, partitions, nodes, build(False), GroupHistoryPredictions())
    assert _schedule(kept) == _schedule(sorted_)
