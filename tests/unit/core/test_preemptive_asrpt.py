"""asrpt-preempt: A-SRPT that requeues a running job for waiting jobs of far less predicted
work (issue 15), worked out by hand on one node of two accelerators, alpha = 1 s/iteration."""

from __future__ import annotations

import math

import pytest

from asrpt.core.policies import make_policy
from asrpt.core.policies.asrpt import ASRPTOptions
from asrpt.core.policies.preemption import PreemptiveASRPTPolicy
from asrpt.sim.cluster import RequeueCost
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import OraclePredictions
from tests.helpers import flat_job, flat_speed_table, partition_nodes


def _run(jobs, policy=None, cost=RequeueCost(), per_node=2, count=1):
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=count, per_node=per_node)
    policy = policy or make_policy("asrpt-preempt", speed)
    return simulate(jobs, [partition], nodes, policy, OraclePredictions(), requeue_cost=cost)


def test_a_long_job_is_requeued_for_a_far_smaller_one():
    """long (2 x 5000) runs from 0; short (1 x 10) arrives at 2000 and completes on the virtual
    machine (size 10 x 1/2) at 2005, when it becomes dispatchable: 10 accelerator-seconds
    against long's 5,990 left, far past the ratio: long is requeued, short runs 2005-2015, long
    restarts at 2015 with its 2,995 iterations left (free preemption) and ends at 5010."""
    result = _run([flat_job("long", 2, 5000.0), flat_job("short", 1, 10.0, submit_s=2000.0)])
    long_job, short = result.records["long"], result.records["short"]
    assert (short.first_start_s, short.end_s) == (2005.0, 2015.0)
    assert long_job.preemptions == 1 and long_job.end_s == pytest.approx(5010.0)


def test_no_requeue_when_the_waiting_job_is_not_far_smaller():
    """short has 2,000 accelerator-seconds against long's 6,000 left: a ratio of 3 < 4, so
    long runs to its end (5000) and short starts then."""
    result = _run([flat_job("long", 2, 5000.0), flat_job("short", 1, 2000.0, submit_s=2000.0)])
    assert result.records["long"].preemptions == 0
    assert result.records["short"].first_start_s == 5000.0


def test_a_job_is_not_requeued_in_its_exempt_time_but_right_after():
    """short arrives at 100 (dispatchable at 105), within long's first ten minutes: it waits
    until the exempt time ends (the policy asks to be woken then), not until long's end."""
    result = _run([flat_job("long", 2, 5000.0), flat_job("short", 1, 10.0, submit_s=100.0)])
    assert result.records["short"].first_start_s == ASRPTOptions().preempt_exempt_s
    assert result.records["long"].preemptions == 1


def test_a_requeue_costs_the_work_since_the_last_checkpoint_and_a_restart():
    """Checkpoints every 600 s of run, 60 s to restart: at 2005 long has run 2005 s, its last
    checkpoint kept 1800 of them; it restarts at 2015 with 5000 - 1800 + 60 = 3260 s of work."""
    result = _run([flat_job("long", 2, 5000.0), flat_job("short", 1, 10.0, submit_s=2000.0)],
                  cost=RequeueCost(checkpoint_interval_s=600.0, restart_s=60.0))
    assert result.records["long"].end_s == pytest.approx(2015.0 + 3260.0)


def test_tiresias_pays_the_same_requeue_cost():
    """Tiresias requeues long at short's arrival (2000): 1800 s kept, restart at 2010."""
    speed = flat_speed_table()
    jobs = [flat_job("long", 2, 5000.0), flat_job("short", 1, 10.0, submit_s=2000.0)]
    free = _run(jobs, make_policy("tiresias", speed))
    costed = _run(jobs, make_policy("tiresias", speed), cost=RequeueCost(600.0, 60.0))
    assert free.records["long"].end_s == pytest.approx(5010.0)
    assert costed.records["long"].end_s == pytest.approx(2010.0 + 3260.0)


def test_an_overdue_job_gets_room_in_its_shape_by_requeues():
    """Two nodes of one accelerator. 'a' and 'b' (1 x 10,000) hold both; 'wide' (2 x 100, one
    accelerator on each node) waits. With the ratio out of reach only the starvation guard
    (overdue after 1,000 s) can help: at 1001 it requeues both, wide runs 1001-1101, and a and
    b start again then (free preemption: they end at 10,100)."""
    speed = flat_speed_table()
    policy = PreemptiveASRPTPolicy(speed, ASRPTOptions(overdue_after_s=1000.0, preempt_ratio=1e9))
    jobs = [flat_job("a", 1, 10000.0), flat_job("b", 1, 10000.0), flat_job("wide", 2, 100.0, submit_s=1.0)]
    result = _run(jobs, policy, per_node=1, count=2)
    wide = result.records["wide"]
    assert (wide.first_start_s, wide.end_s) == (1001.0, 1101.0)
    assert result.records["a"].preemptions == result.records["b"].preemptions == 1
    assert result.records["a"].end_s == pytest.approx(10100.0)
    # Without the guard wide waits for a and b to end.
    unguarded = _run(jobs, PreemptiveASRPTPolicy(speed, ASRPTOptions(overdue_after_s=math.inf, preempt_ratio=1e9)),
                     per_node=1, count=2)
    assert unguarded.records["wide"].first_start_s == 10000.0


def test_the_ratio_must_keep_a_requeued_job_from_displacing_back():
    with pytest.raises(ValueError, match="preempt_ratio"):
        ASRPTOptions(preempt_ratio=0.5)


def test_a_job_slurm_may_not_requeue_is_never_requeued():
    from dataclasses import replace

    long_job = replace(flat_job("long", 2, 5000.0), requeueable=False)
    result = _run([long_job, flat_job("short", 1, 10.0, submit_s=2000.0)])
    assert result.records["long"].preemptions == 0 and result.records["short"].first_start_s == 5000.0


@pytest.mark.parametrize(("max_requeues", "preemptions"), [(1, 1), (2, 2), (0, 0)])
def test_a_job_is_requeued_at_most_max_requeues_times(max_requeues, preemptions):
    """Without a bound, a requeued job restarts in the next gap and the next smaller job
    displaces it again, losing its work each time (Gavel at load 1.1: a job requeued 141
    times, the replay never ending). shorts arrive at 2000 and 3000."""
    policy = PreemptiveASRPTPolicy(flat_speed_table(), ASRPTOptions(max_requeues=max_requeues))
    jobs = [flat_job("long", 2, 5000.0), flat_job("s1", 1, 10.0, submit_s=2000.0), flat_job("s2", 1, 10.0, submit_s=3000.0)]
    result = _run(jobs, policy)
    assert result.records["long"].preemptions == preemptions


def test_a_job_that_may_restart_on_slower_accelerators_is_not_requeued():
    """Gavel: a job requeued from a V100 restarted on a K80 and took up to 9x as long. 'long'
    runs on the fast partition but may also run on the slow one (10x slower): it is not
    requeued for 'short'; restricted to the fast partition, it is."""
    from dataclasses import replace

    from asrpt.core.model import Node, Partition
    from asrpt.core.speed import SpeedTable

    from asrpt.core.speed import WorkloadProfile

    speed = SpeedTable(workload_classes=["flat"], accelerators=["fast", "slow"], step_time_s=[[1.0, 10.0]],
                       profiles={"flat": WorkloadProfile(name="flat", params_gb=0.0, activation_gb_per_microbatch=0.0,
                                                         tp_allreduce_gb_per_microbatch=0.0)})
    partitions = [Partition(name="fast", accelerator="fast"), Partition(name="slow", accelerator="slow")]
    nodes = [Node(name="f0", partition="fast", accelerator="fast", accelerators_total=2, accelerators_free=2),
             Node(name="s0", partition="slow", accelerator="slow", accelerators_total=2, accelerators_free=2)]
    filler = replace(flat_job("filler", 2, 1e6), allowed_partitions=("slow",))
    for allowed, requeued in ((("fast", "slow"), 0), (("fast",), 1)):
        long_job = replace(flat_job("long", 2, 5000.0, submit_s=1.0), allowed_partitions=allowed)
        short = replace(flat_job("short", 1, 10.0, submit_s=2000.0), allowed_partitions=("fast",))
        result = simulate([filler, long_job, short], partitions, nodes, make_policy("asrpt-preempt", speed), OraclePredictions())
        assert result.records["long"].partitions[0] == "fast"
        assert result.records["long"].preemptions == requeued, allowed
