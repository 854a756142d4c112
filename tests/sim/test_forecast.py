"""The forecast replays the present with the live policy: it must agree with what then happens
when every job runs exactly as predicted."""

import pytest

from asrpt.core.policies import make_policy
from asrpt.core.model import ClusterSnapshot, Placement, RunningJob
from asrpt.sim.engine import simulate
from asrpt.sim.forecast import forecast, remaining_iterations
from asrpt.sim.predictors import OraclePredictions
from tests.helpers import flat_job, flat_speed_table, partition_nodes


class _Recorder:
    """Wraps a policy and keeps the snapshot and state of the first cycle at or after ``at_s``."""

    def __init__(self, inner, at_s):
        self.inner, self.at_s, self.name, self.captured = inner, at_s, inner.name, None
        self.speed = inner.speed

    def new_state(self):
        return self.inner.new_state()

    def restore_state(self, data):
        return self.inner.restore_state(data)

    def decide(self, snapshot, now_s, state):
        if self.captured is None and now_s >= self.at_s:
            self.captured = (snapshot.frozen(), now_s, state.to_dict())
        return self.inner.decide(snapshot, now_s, state)


@pytest.mark.parametrize("policy_name", ["asrpt", "asrpt-strict", "fifo", "spwf", "multifactor"])
def test_forecast_mid_replay_predicts_exactly_what_then_happens(policy_name):
    """Perfect predictions, no arrival after the forecast: the forecast made mid-replay must
    give every job's start and end exactly as the replay then produces them."""
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=2)
    sizes = [(2, 100), (1, 30), (1, 10), (2, 20), (1, 5), (1, 60), (2, 5), (1, 40), (1, 15), (2, 10)]
    jobs = [flat_job(str(i), g, float(n), submit_s=float(i), time_limit_s=3.0 * n) for i, (g, n) in enumerate(sizes)]
    recorder = _Recorder(make_policy(policy_name, speed), at_s=12.0)
    truth = simulate(jobs, [partition], nodes, recorder, OraclePredictions())
    snapshot, now_s, state_data = recorder.captured
    predicted = forecast(snapshot, now_s, make_policy(policy_name, speed), state_data, lambda job: job.predicted_iterations)
    assert set(predicted) == {j.job_id for j in snapshot.pending} | {r.job.job_id for r in snapshot.running}
    for job_id, f in predicted.items():
        record = truth.records[job_id]
        assert (f.start_s, f.end_s) == pytest.approx((record.first_start_s, record.end_s)), job_id


def test_running_jobs_keep_their_nodes_and_remaining_time():
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=2)
    busy = flat_job("busy", 2, 100.0)
    running = RunningJob(job=busy, placement=Placement(job_id="busy", partition="gpu", worker_nodes=(nodes[0].name,) * 2, iteration_time_s=1.0), start_time_s=0.0)
    from dataclasses import replace

    full = tuple(replace(n, accelerators_free=0) for n in nodes)
    waiting = flat_job("next", 1, 10.0, submit_s=5.0)
    policy = make_policy("asrpt", speed)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=full, pending=(waiting,), running=(running,))
    predicted = forecast(snapshot, 40.0, policy, policy.new_state().to_dict(), lambda job: job.predicted_iterations)
    assert predicted["busy"].end_s == pytest.approx(100.0) and predicted["busy"].running
    assert predicted["next"].start_s == pytest.approx(100.0) and predicted["next"].end_s == pytest.approx(110.0)


def test_a_job_past_its_prediction_runs_as_long_again():
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    job = flat_job("late", 1, 10.0)
    running = RunningJob(job=job, placement=Placement(job_id="late", partition="gpu", worker_nodes=(nodes[0].name,), iteration_time_s=1.0), start_time_s=0.0)
    assert remaining_iterations(running, 50.0, 10.0) == 50.0
    assert remaining_iterations(running, 4.0, 10.0) == 6.0


def test_a_job_no_partition_can_hold_does_not_blank_the_others_etas():
    """A request no partition can ever satisfy (3 nodes x 1 where the partition has 2 nodes)
    stays pending forever; the forecast says so for that job (inf) and still forecasts the
    rest, instead of stalling and giving every job an unknown start."""
    from asrpt.core.model import RequestShape

    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=2)
    impossible = flat_job("wide", 3, 10.0, submit_s=0.0)
    from dataclasses import replace

    impossible = replace(impossible, request_shape=RequestShape(nodes=3, per_node=1))
    ordinary = flat_job("small", 1, 10.0, submit_s=1.0)
    policy = make_policy("asrpt", speed)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(impossible, ordinary))
    predicted = forecast(snapshot, 5.0, policy, policy.new_state().to_dict(), lambda job: 10.0)
    assert predicted["wide"].start_s == float("inf")
    assert predicted["small"].start_s == pytest.approx(5.0) and predicted["small"].end_s == pytest.approx(15.0)


def _one_node_busy_until(end_s):
    from dataclasses import replace

    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    busy = flat_job("busy", 1, end_s)
    running = RunningJob(job=busy, placement=Placement(job_id="busy", partition="gpu", worker_nodes=(nodes[0].name,), iteration_time_s=1.0), start_time_s=0.0)
    return partition, tuple(replace(n, accelerators_free=0) for n in nodes), running


def test_no_forecast_passes_a_time_limit_and_jobs_behind_do_not_inherit_the_overrun():
    """``--time=00:30:00`` with a prediction of 51 minutes: Slurm kills the job at 30, so the
    forecast ends it there and starts the next job then, not 21 minutes after the kill."""
    speed = flat_speed_table()
    partition, nodes, running = _one_node_busy_until(100.0)
    over = flat_job("over", 1, 3060.0, submit_s=1.0, time_limit_s=1800.0)  # 51 min at 1 s/iteration
    behind = flat_job("behind", 1, 60.0, submit_s=2.0, time_limit_s=3600.0)
    policy = make_policy("fifo", speed)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(over, behind), running=(running,))
    predicted = forecast(snapshot, 10.0, policy, policy.new_state().to_dict(), lambda job: job.predicted_iterations)
    assert predicted["over"].start_s == pytest.approx(100.0)
    assert predicted["over"].end_s == pytest.approx(100.0 + 1800.0)
    assert predicted["behind"].start_s == pytest.approx(100.0 + 1800.0)


def test_a_running_job_past_its_limit_is_not_forecast_past_it():
    speed = flat_speed_table()
    partition, nodes, _ = _one_node_busy_until(1.0)
    job = flat_job("late", 1, 10.0, time_limit_s=600.0)
    running = RunningJob(job=job, placement=Placement(job_id="late", partition="gpu", worker_nodes=(nodes[0].name,), iteration_time_s=1.0), start_time_s=0.0)
    policy = make_policy("asrpt", speed)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(), running=(running,))
    predicted = forecast(snapshot, 500.0, policy, policy.new_state().to_dict(), lambda job: 10.0)
    assert 500.0 <= predicted["late"].end_s <= 600.0


def test_a_job_with_no_prediction_has_an_unknown_end_bounded_by_its_limit():
    """No history: the end is not a forecast but a bound; the rows and texts say so."""
    from dataclasses import replace

    speed = flat_speed_table()
    partition, nodes, _ = _one_node_busy_until(1.0)
    unseen = replace(flat_job("new", 1, 10.0, time_limit_s=3600.0), predicted_iterations=0.0)
    running = RunningJob(job=unseen, placement=Placement(job_id="new", partition="gpu", worker_nodes=(nodes[0].name,), iteration_time_s=1.0), start_time_s=0.0)
    known = replace(flat_job("known", 1, 10.0, time_limit_s=3600.0), predicted_iterations=50.0)
    policy = make_policy("asrpt", speed)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(known,), running=(running,))
    predicted = forecast(snapshot, 2400.0, policy, policy.new_state().to_dict(), lambda job: job.predicted_iterations or 3600.0)
    assert predicted["new"].end_unknown and predicted["new"].end_s == pytest.approx(3600.0)
    assert not predicted["known"].end_unknown
