"""Tiresias on a node-based cluster with allocation shapes must not churn.

Its budget counts accelerators per partition; a job starts only in its shape. Before the fix,
slots freed for a waiting job whose shape they did not form were taken by a lower job, the
victim displaced that job at the next event, and so on: on the first 1,500 jobs of the PAI
slice more than 200,000 preemptions (and a replay that did not finish in minutes).
"""

from pathlib import Path

import asrpt
from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import make_predictions
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs
from tests.helpers import WrappedPolicy

SLICE = Path(asrpt.__file__).parent / "data" / "traces" / "pai_slice.csv"
JOBS = 1500


class _Churn(RuntimeError):
    pass


class _CountingPolicy(WrappedPolicy):
    """The policy, failing fast once it has preempted more than ``limit`` times in all."""

    def __init__(self, inner, limit):
        super().__init__(inner)
        self.limit, self.preemptions = limit, 0

    def decide(self, snapshot, now_s, state):
        decision = self.inner.decide(snapshot, now_s, state)
        self.preemptions += len(decision.preempts)
        if self.preemptions > self.limit:
            raise _Churn(f"{self.preemptions} preemptions by t={now_s:.0f}s for {JOBS} jobs")
        return decision


def test_tiresias_preempts_only_for_starts_that_happen():
    cluster = load_cluster("pai")
    speed = cluster.speed_table(default_speed_table())
    records = read_trace(SLICE, "pai", limit=JOBS).records
    jobs = build_jobs(records, cluster, speed, seed=0).jobs
    policy = _CountingPolicy(make_policy("tiresias", speed), limit=3 * len(jobs))
    result = simulate(jobs, cluster.partitions, cluster.nodes, policy, make_predictions("history"))
    assert all(r.end_s is not None for r in result.records.values())
    assert policy.preemptions <= 3 * len(jobs)


def test_a_job_is_not_preempted_before_its_exempt_time():
    """Like Slurm's PreemptExemptTime: a job that (re)started less than ``preempt_exempt_s``
    ago keeps running even when a higher-priority job waits for its accelerators."""
    from dataclasses import replace

    from asrpt.core.model import ClusterSnapshot, Placement, RunningJob
    from tests.helpers import flat_job, flat_speed_table, partition_nodes

    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    old = flat_job("old", 1, 1e6, submit_s=0.0)
    running = RunningJob(job=old, placement=Placement(job_id="old", partition="gpu", worker_nodes=(nodes[0].name,),
                                                      iteration_time_s=1.0), start_time_s=0.0)
    newcomer = flat_job("new", 1, 10.0, submit_s=1.0)
    full = (replace(nodes[0], accelerators_free=0),)
    policy = make_policy("tiresias", speed)
    state = policy.new_state()
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=full, pending=(newcomer,), running=(running,))
    # "old" has attained 10 h of GPU time (a lower queue) once the policy has watched it run.
    policy.decide(ClusterSnapshot(partitions=(partition,), nodes=full, pending=(), running=(running,)), 0.0, state)
    assert policy.decide(snapshot, 36_001.0, state).preempts == ("old",)
    restarted = replace(running, start_time_s=36_000.0)
    state = policy.new_state()
    policy.decide(ClusterSnapshot(partitions=(partition,), nodes=full, pending=(), running=(running,)), 0.0, state)
    late = ClusterSnapshot(partitions=(partition,), nodes=full, pending=(newcomer,), running=(restarted,))
    assert policy.decide(late, 36_001.0, state).preempts == ()
