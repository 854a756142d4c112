"""A-SRPT policy: order, oracle/unseen treatment, and a restart that continues the same schedule."""

import json
import math
from dataclasses import replace
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.model import ClusterSnapshot, Job, ParallelConfig
from asrpt.core.policies import POLICIES, make_policy
from asrpt.core.policies.asrpt import ASRPTOptions, ASRPTPolicy
from asrpt.core.speed import default_speed_table
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import GroupHistoryPredictions, OraclePredictions
from tests.helpers import flat_job, flat_speed_table, partition_nodes

SPEED = default_speed_table()


def test_shorter_predicted_work_goes_first_on_an_idle_cluster():
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    jobs = [flat_job("long", 1, 1000.0), flat_job("short", 1, 10.0), flat_job("mid", 1, 100.0)]
    result = simulate(jobs, [partition], nodes, ASRPTPolicy(speed), OraclePredictions())
    starts = sorted(result.records.values(), key=lambda r: r.first_start_s)
    assert [r.job.job_id for r in starts] == ["short", "mid", "long"]


def test_unseen_jobs_predict_zero_and_go_first():
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    snapshot = ClusterSnapshot(
        partitions=(partition,),
        nodes=nodes,
        pending=(
            flat_job("known", 1, 10.0),
            Job(job_id="new", submit_time_s=0.0, parallel=ParallelConfig(), workload_class="flat", true_iterations=500.0),
        ),
    )
    policy = ASRPTPolicy(speed)
    decision = policy.decide(snapshot, 0.0, policy.new_state())
    assert decision.order[0] == "new" and [p.job_id for p in decision.starts] == ["new"]


def test_oracle_reads_true_iterations():
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    lying = Job(
        job_id="a", submit_time_s=0.0, parallel=ParallelConfig(), workload_class="flat", true_iterations=1000.0, predicted_iterations=1.0
    )
    honest = flat_job("b", 1, 10.0)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(lying, honest))
    for use_true, first in ((False, "a"), (True, "b")):
        policy = ASRPTPolicy(speed, ASRPTOptions(use_true_iterations=use_true))
        # by t=2000 both have completed on the virtual machine; Q holds them in that order
        assert policy.decide(snapshot, 2000.0, policy.new_state()).starts[0].job_id == first


class RestartingPolicy:
    """Serialises its state to JSON and back at every cycle, as a daemon restart would."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.speed = inner.speed

    def new_state(self):
        return self.inner.new_state()

    def decide(self, snapshot, now_s, state):
        data = json.loads(json.dumps(state.to_dict()))
        restored = self.inner.restore_state(data)
        decision = self.inner.decide(snapshot, now_s, restored)
        state.__init__(**{f: getattr(restored, f) for f in restored.__slots__})
        return decision


def _random_jobs(seed, n=40):
    rng = random.Random(seed)
    classes = SPEED.workload_classes
    jobs = []
    for i in range(n):
        d, p, t = rng.choice([(1, 1, 1), (2, 1, 1), (1, 1, 4), (2, 2, 2), (4, 1, 1), (1, 2, 4)])
        jobs.append(
            Job(
                job_id=str(i),
                submit_time_s=rng.uniform(0, 3000),
                parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=4 if p > 1 else 1),
                workload_class=rng.choice(classes),
                group=f"g{rng.randrange(6)}",
                true_iterations=rng.uniform(10, 3000),
            )
        )
    return jobs


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_restart_at_every_cycle_changes_nothing(name):
    from asrpt.core.model import Node, Partition

    partitions = [Partition(name="a100", accelerator="a100"), Partition(name="v100", accelerator="v100")]
    nodes = [Node(name=f"a{i}", partition="a100", accelerator="a100", accelerators_total=8, accelerators_free=8) for i in range(2)]
    nodes += [Node(name="v0", partition="v100", accelerator="v100", accelerators_total=4, accelerators_free=4)]
    jobs = _random_jobs(7)
    plain = simulate(jobs, partitions, nodes, make_policy(name, SPEED), GroupHistoryPredictions(), keep_events=True)
    restarted = simulate(jobs, partitions, nodes, RestartingPolicy(make_policy(name, SPEED)), GroupHistoryPredictions(), keep_events=True)
    assert plain.events == restarted.events


def _both_virtually_complete_snapshot():
    """'big' (100 s) completes on the virtual machine at t=100, 'small' (10 s, submitted at
    t=200) at t=210: by t=2000 both are in Q, big first in virtual completion order."""
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    jobs = (flat_job("big", 1, 100.0), flat_job("small", 1, 10.0, submit_s=200.0))
    return ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=jobs)


@pytest.mark.parametrize(("queue_order", "first"), [("work", "small"), ("virtual_completion", "big")])
def test_queue_order_decides_which_virtually_complete_job_starts(queue_order, first):
    policy = ASRPTPolicy(flat_speed_table(), ASRPTOptions(queue_order=queue_order))
    decision = policy.decide(_both_virtually_complete_snapshot(), 2000.0, policy.new_state())
    assert [p.job_id for p in decision.starts] == [first]
    assert decision.order[0] == first


def test_work_order_is_the_default():
    assert ASRPTOptions().queue_order == "work"


def test_work_order_never_starts_a_job_before_its_virtual_completion():
    policy = ASRPTPolicy(flat_speed_table(), ASRPTOptions(queue_order="work"))
    decision = policy.decide(_both_virtually_complete_snapshot(), 150.0, policy.new_state())
    # at t=150 only big has completed virtually; small is not even submitted
    assert [p.job_id for p in decision.starts] == ["big"]
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    late = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(flat_job("long", 1, 500.0),))
    state = policy.new_state()
    assert policy.decide(late, 499.0, state).starts == ()
    assert [p.job_id for p in policy.decide(late, 500.0, state).starts] == ["long"]


#: (accelerators, iterations, submit s) of random flat jobs, with ties in work.
SIZES = st.lists(
    st.tuples(st.integers(1, 4), st.sampled_from([5.0, 10.0, 20.0, 40.0]), st.integers(0, 300)),
    min_size=1,
    max_size=25,
)


def _busy_cluster_with(sizes):
    """The jobs and a snapshot of two full 4-accelerator nodes: nothing starts, the order is all."""
    partition, free_nodes = partition_nodes("gpu", "gpu", count=2, per_node=4)
    busy = tuple(replace(n, accelerators_free=0) for n in free_nodes)
    jobs = tuple(flat_job(str(i), g, n, submit_s=float(t)) for i, (g, n, t) in enumerate(sizes))
    return jobs, ClusterSnapshot(partitions=(partition,), nodes=busy, pending=jobs)


@settings(max_examples=60, deadline=None)
@given(
    sizes=SIZES,
    now_s=st.integers(0, 1500),
)
def test_work_order_is_q_sorted_by_predicted_work_ties_by_virtual_completion(sizes, now_s):
    """Same Q as the paper's order (the gating is unchanged), re-ordered by g x n x alpha_min."""
    jobs, snapshot = _busy_cluster_with(sizes)
    speed = flat_speed_table()
    paper = ASRPTPolicy(speed, ASRPTOptions(queue_order="virtual_completion"))
    paper_state = paper.new_state()
    paper.decide(snapshot, float(now_s), paper_state)
    by_work = ASRPTPolicy(speed, ASRPTOptions(queue_order="work"))
    decision = by_work.decide(snapshot, float(now_s), by_work.new_state())
    q = list(paper_state.queue)
    work = {j.job_id: j.accelerators * j.true_iterations for j in jobs}
    expected = sorted(q, key=lambda j: (work[j], q.index(j)))
    assert tuple(decision.order)[: len(q)] == tuple(expected)
    assert sorted(decision.order) == sorted(j.job_id for j in jobs)  # no job lost


@pytest.mark.parametrize(("overdue_after_s", "first"), [(math.inf, "small"), (1900.0, "big"), (1700.0, "big")])
def test_an_overdue_job_goes_ahead_of_the_work_order(overdue_after_s, first):
    """At t=2000 big has waited 2,000 s and small 1,800 s: with the guard at 1,900 s only big
    is overdue and heads Q; at 1,700 s both are, and the longer-waiting big heads it."""
    policy = ASRPTPolicy(flat_speed_table(), ASRPTOptions(queue_order="work", overdue_after_s=overdue_after_s))
    decision = policy.decide(_both_virtually_complete_snapshot(), 2000.0, policy.new_state())
    assert [p.job_id for p in decision.starts] == [first]
    assert tuple(decision.order) == ((first, "big" if first == "small" else "small"))


def test_the_guard_is_a_week_by_default_and_refuses_negative_values():
    assert ASRPTOptions().overdue_after_s == 7 * 86400.0
    with pytest.raises(ValueError, match="overdue_after_s"):
        ASRPTOptions(overdue_after_s=-1.0)


@settings(max_examples=60, deadline=None)
@given(
    sizes=SIZES,
    looks=st.lists(st.integers(0, 1500), min_size=1, max_size=5),
    overdue_after_s=st.sampled_from([0.0, 100.0, 400.0]),
)
def test_the_longest_waiting_overdue_job_heads_the_work_order(sizes, looks, overdue_after_s):
    jobs, snapshot = _busy_cluster_with(sizes)
    speed = flat_speed_table()
    paper = ASRPTPolicy(speed, ASRPTOptions(queue_order="virtual_completion"))
    guarded = ASRPTPolicy(speed, ASRPTOptions(queue_order="work", overdue_after_s=overdue_after_s))
    paper_state, guarded_state = paper.new_state(), guarded.new_state()
    by_id = {j.job_id: j for j in jobs}
    for now_s in sorted(float(t) for t in looks):  # the same state across looks: jobs become overdue
        paper.decide(snapshot, now_s, paper_state)
        decision = guarded.decide(snapshot, now_s, guarded_state)
        q = list(paper_state.queue)
        # Every pending job is watched, in Q or still on the virtual machine (a job believed
        # huge may never complete there, and the guard exists for exactly such jobs).
        overdue = sorted((j for j in by_id if now_s - by_id[j].submit_time_s >= overdue_after_s), key=lambda j: (by_id[j].submit_time_s, int(j)))
        head = overdue[:1]
        rest = sorted((j for j in q if j not in head), key=lambda j: (by_id[j].accelerators * by_id[j].true_iterations, q.index(j)))
        assert tuple(decision.order)[: len(head) + len(rest)] == tuple(head + rest)
        assert sorted(decision.order) == sorted(by_id)


def test_restarts_keep_the_overdue_list():
    from asrpt.core.model import Node, Partition

    partitions = [Partition(name="a100", accelerator="a100"), Partition(name="v100", accelerator="v100")]
    nodes = [Node(name=f"a{i}", partition="a100", accelerator="a100", accelerators_total=8, accelerators_free=8) for i in range(2)]
    nodes += [Node(name="v0", partition="v100", accelerator="v100", accelerators_total=4, accelerators_free=4)]
    jobs = _random_jobs(11, n=60)
    options = ASRPTOptions(overdue_after_s=200.0)
    plain = simulate(jobs, partitions, nodes, make_policy("asrpt", SPEED, options), GroupHistoryPredictions(), keep_events=True)
    restarted = simulate(jobs, partitions, nodes, RestartingPolicy(make_policy("asrpt", SPEED, options)), GroupHistoryPredictions(), keep_events=True)
    unguarded = simulate(jobs, partitions, nodes, make_policy("asrpt", SPEED, ASRPTOptions(overdue_after_s=math.inf)), GroupHistoryPredictions(), keep_events=True)
    assert plain.events == restarted.events
    assert plain.events != unguarded.events  # the guard fired in this workload


def test_explain_says_why_an_overdue_job_heads_the_queue():
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    busy = tuple(replace(n, accelerators_free=0) for n in nodes)
    snapshot = replace(_both_virtually_complete_snapshot(), nodes=busy)
    policy = ASRPTPolicy(flat_speed_table(), ASRPTOptions(queue_order="work", overdue_after_s=86400.0))
    decision = policy.decide(snapshot, 2.5 * 86400.0, policy.new_state())
    assert decision.order[0] == "big"
    assert decision.reasons["big"] == "pending for 2.5 days, over the starvation guard's 1.0: heads the queue"
    assert "starvation" not in decision.reasons.get("small", "")
    # with room for one job, the overdue head is the one that starts
    blocked = replace(snapshot, pending=snapshot.pending + (flat_job("wide", 2, 1.0),))
    decision = policy.decide(replace(blocked, nodes=nodes), 2.5 * 86400.0 + 1, policy.new_state())
    assert decision.order[0] == "big" and [p.job_id for p in decision.starts] == ["big"]


def test_a_prefixed_reason_keeps_the_dispatchers_reason_behind_it():
    from asrpt.core.reasons import Reasons

    reasons = Reasons()
    reasons.note("a", "waiting for {} accelerators", 4)
    reasons.prefix("a", "heads the queue after {} days", 8)
    reasons.prefix("b", "heads the queue after {} days", 9)
    assert reasons["a"] == "heads the queue after 8 days; waiting for 4 accelerators"
    assert reasons["b"] == "heads the queue after 9 days"


def test_beliefs_are_capped_at_what_fits_in_the_time_limit():
    """A job predicted at 10,000 iterations with a 100 s limit at 1 s per iteration can run
    at most 100: it is ranked (and reserved for) as a 100-iteration job, unless the cap is off."""
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    over = replace(flat_job("over", 1, 50.0), predicted_iterations=10_000.0, time_limit_s=100.0)
    mid = flat_job("mid", 1, 500.0)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(over, mid))
    capped = ASRPTPolicy(speed)
    alpha = capped._alpha_min_s(over, snapshot, capped.new_state())
    assert capped.capped_iterations(over, alpha) == pytest.approx(100.0 / alpha)
    assert capped.runtime_s(over, alpha) == pytest.approx(100.0)
    assert capped.capped_iterations(mid, alpha) == 500.0  # no limit: no cap
    paper = ASRPTPolicy(speed, ASRPTOptions(time_limit_cap=False))
    assert paper.capped_iterations(over, alpha) == 10_000.0
    assert paper.runtime_s(over, alpha) == pytest.approx(10_000.0 * alpha)
    for policy, first in ((capped, "over"), (paper, "mid")):
        assert policy.decide(snapshot, 20_000.0, policy.new_state()).starts[0].job_id == first


def test_a_job_without_any_prediction_is_believed_to_run_its_time_limit():
    """None (nothing known, not the paper's 0) with a limit: what fits in the limit; without
    a limit, or with the cap off, None stays the paper's 0."""
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    unknown = replace(flat_job("unknown", 1, 50.0), predicted_iterations=None, time_limit_s=100.0)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(unknown,))
    policy = ASRPTPolicy(speed)
    alpha = policy._alpha_min_s(unknown, snapshot, policy.new_state())
    assert policy.capped_iterations(unknown, alpha) == pytest.approx(100.0 / alpha)
    assert policy.runtime_s(unknown, alpha) == pytest.approx(100.0)
    assert policy.capped_iterations(replace(unknown, time_limit_s=None), alpha) == 0.0
    paper = ASRPTPolicy(speed, ASRPTOptions(time_limit_cap=False))
    assert paper.capped_iterations(unknown, alpha) == 0.0 and paper.runtime_s(unknown, alpha) == 0.0
    oracle = ASRPTPolicy(speed, ASRPTOptions(use_true_iterations=True))
    assert oracle.capped_iterations(unknown, alpha) == pytest.approx(50.0)


def test_the_guard_also_watches_jobs_the_virtual_machine_has_not_completed():
    """A job believed huge may never complete on the virtual machine while smaller ones keep
    arriving; the guard exists for exactly that job, so it must head the order once overdue
    (Philly: a 16-GPU job with no prediction, believed to run its 4,331 h limit, waited 249 h
    under a 168 h guard because it never entered Q)."""
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=1)
    huge = flat_job("huge", 1, 1e9)
    stream = tuple(flat_job(f"s{i}", 1, 10.0, submit_s=100.0 * i) for i in range(1, 40))
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(huge, *stream))
    policy = ASRPTPolicy(flat_speed_table(), ASRPTOptions(queue_order="work", overdue_after_s=3000.0))
    state = policy.new_state()
    before = policy.decide(snapshot, 2900.0, state)
    assert "huge" not in state.queue and [p.job_id for p in before.starts] != ["huge"]
    decision = policy.decide(snapshot, 3100.0, state)
    assert "huge" not in state.queue  # still on the virtual machine
    assert decision.order[0] == "huge" and [p.job_id for p in decision.starts] == ["huge"]
    assert list(decision.order).count("huge") == 1
    assert "starvation guard" in decision.reasons["huge"]
