"""The simulator's live pending view and A-SRPT's lazily built order refuse to be read stale."""

import pytest

from asrpt.core.model import ChangeLog, ClusterSnapshot, Job, LazyOrder, ParallelConfig, PendingJobs, StaleOrder, StaleSnapshot
from asrpt.core.policies import make_policy
from asrpt.sim.cluster import SimCluster
from tests.helpers import flat_job, flat_speed_table, partition_nodes


def _job(job_id: str) -> Job:
    return Job(job_id=job_id, submit_time_s=0.0, parallel=ParallelConfig(), workload_class="resnet50")


def test_pending_view_reads_like_a_tuple_and_reports_changes_since_a_cursor():
    log = ChangeLog()
    jobs = {"1": _job("1"), "2": _job("2")}
    log.ids += ["1", "2"]
    view = PendingJobs(jobs, log)
    assert list(view) == [jobs["1"], jobs["2"]] and len(view) == 2 and view[1] is jobs["2"]
    assert view == (jobs["1"], jobs["2"])
    assert view.changes_since(log, 1) == (["2"], 2)
    assert view.changes_since(ChangeLog(), 0) == (None, 2)  # another backend's log: rescan


def test_pending_view_read_after_the_backend_changed_raises_and_frozen_copy_survives():
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=2)
    cluster = SimCluster([partition], nodes)
    cluster.submit(flat_job("a", 1, 10.0))
    snapshot = cluster.snapshot()
    kept = snapshot.frozen()
    cluster.submit(flat_job("b", 1, 10.0))
    with pytest.raises(StaleSnapshot):
        list(snapshot.pending)
    assert [j.job_id for j in kept.pending] == ["a"]
    assert isinstance(kept, ClusterSnapshot) and kept.frozen() is kept


def test_asrpt_order_is_built_on_read_and_refuses_to_be_read_after_the_next_decision():
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    policy = make_policy("asrpt", speed)
    state = policy.new_state()
    jobs = (flat_job("long", 1, 100.0), flat_job("short", 1, 5.0), flat_job("mid", 1, 50.0))
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=tuple(nodes), pending=jobs)
    first = policy.decide(snapshot, 0.0, state)
    assert isinstance(first.order, LazyOrder)
    assert list(first.order) == ["short", "mid", "long"]  # all still on the virtual machine, by remaining work
    second = policy.decide(snapshot, 1.0, state)
    assert list(first.order)  # already built: stays readable
    third = policy.decide(snapshot, 2.0, state)
    with pytest.raises(StaleOrder):
        list(second.order)
    assert set(third.order) == {"short", "mid", "long"}


def test_lazy_order_compares_as_the_tuple_it_stands_for():
    order = LazyOrder(lambda: ("1", "2"), lambda: True)
    assert order == ("1", "2") and order[0] == "1" and len(order) == 2
