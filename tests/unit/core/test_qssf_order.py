"""QSSF's kept queue: re-filed when a group's or user's history grows, equal to a full sort."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.model import ClusterSnapshot, Placement, RunningJob
from asrpt.core.policies.baselines import QssfPolicy
from tests.helpers import flat_job, flat_speed_table, partition_nodes


def _running(job, start_s):
    return RunningJob(job=job, placement=Placement(job_id=job.job_id, partition="gpu", worker_nodes=("gpu-000",), iteration_time_s=1.0), start_time_s=start_s)


@settings(max_examples=80, deadline=None)
@given(
    pending=st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["", "g0", "g1"]), st.sampled_from(["", "u0", "u1"])), min_size=1, max_size=20),
    finished=st.lists(st.tuples(st.sampled_from(["", "g0", "g1"]), st.sampled_from(["", "u0", "u1"]), st.integers(1, 5000)), max_size=10),
)
def test_order_equals_a_full_sort_as_history_grows(pending, finished):
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=4)
    busy = tuple(replace(n, accelerators_free=0) for n in nodes)  # nothing starts: the order is all
    queue = tuple(flat_job(f"p{i}", g, 10.0, submit_s=float(i), group=grp, user=usr) for i, (g, grp, usr) in enumerate(pending))
    runs = [(flat_job(f"r{i}", 1, 10.0, group=grp, user=usr), float(ran)) for i, (grp, usr, ran) in enumerate(finished)]
    policy = QssfPolicy(flat_speed_table(), default_runtime_s=700.0)
    state = policy.new_state()
    now_s = 0.0
    # every run is seen running, then one by one they finish (leave the running set)
    for left in range(len(runs) + 1):
        running = tuple(_running(job, now_s - ran) for job, ran in runs[left:])
        snapshot = ClusterSnapshot(partitions=(partition,), nodes=busy, pending=queue, running=running)
        decision = policy.decide(snapshot, now_s, state)
        expected = sorted(queue, key=lambda j: policy.key(j, snapshot, now_s, state))
        assert tuple(decision.order) == tuple(j.job_id for j in expected)
        now_s += 100.0


def test_a_finished_run_of_its_group_moves_a_job_ahead():
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=4)
    busy = tuple(replace(n, accelerators_free=0) for n in nodes)
    first, second = flat_job("first", 1, 10.0, group="slow"), flat_job("second", 1, 10.0, submit_s=1.0, group="quick")
    run = flat_job("run", 1, 10.0, group="quick")
    policy = QssfPolicy(flat_speed_table(), default_runtime_s=3600.0)
    state = policy.new_state()
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=busy, pending=(first, second), running=(_running(run, 0.0),))
    assert tuple(policy.decide(snapshot, 0.0, state).order) == ("first", "second")  # both 3600 s: by arrival
    # run (group quick) finishes after 60 s: quick jobs are now estimated at 60 s
    assert tuple(policy.decide(replace(snapshot, running=()), 60.0, state).order) == ("second", "first")
