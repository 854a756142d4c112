"""Multifactor's kept queues give exactly the order a full sort by priority gives."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.model import ClusterSnapshot
from asrpt.core.policies.baselines import MultifactorPolicy
from tests.helpers import flat_job, flat_speed_table, partition_nodes


@settings(max_examples=80, deadline=None)
@given(
    jobs=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 1000)), min_size=1, max_size=30),
    looks=st.lists(st.integers(0, 2500), min_size=1, max_size=8),
    gone=st.sets(st.integers(0, 29)),
    max_age_s=st.sampled_from([100.0, 600.0, 1e9]),
)
def test_order_equals_a_full_sort_while_jobs_cross_the_age_cap(jobs, looks, gone, max_age_s):
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=8)
    busy = tuple(replace(n, accelerators_free=0) for n in nodes)  # nothing starts: the order is all
    all_jobs = [flat_job(str(i), g, 10.0, submit_s=float(t)) for i, (g, t) in enumerate(jobs)]
    policy = MultifactorPolicy(flat_speed_table(), max_age_s=max_age_s)
    state = policy.new_state()
    for look, now_s in enumerate(sorted(looks)):
        # jobs arrive by submit time; some leave half-way (started elsewhere, cancelled)
        pending = tuple(
            j for i, j in enumerate(all_jobs) if j.submit_time_s <= now_s and not (i in gone and look >= len(looks) // 2)
        )
        snapshot = ClusterSnapshot(partitions=(partition,), nodes=busy, pending=pending)
        decision = policy.decide(snapshot, float(now_s), state)
        expected = sorted(pending, key=lambda j: policy.key(j, snapshot, float(now_s), state))
        assert tuple(decision.order) == tuple(j.job_id for j in expected)


def test_the_age_cap_hands_the_lead_back_to_the_larger_job():
    """Weights 1000/1000 on 16 GPUs, cap at 1,000 s. 'old' (1 GPU, t=0) leads 'big' (4 GPUs,
    t=300) while both age (age gap 300 > size gap 187.5); once both are capped only size
    counts and big leads again."""
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=8)
    busy = tuple(replace(n, accelerators_free=0) for n in nodes)
    old, big = flat_job("old", 1, 10.0), flat_job("big", 4, 10.0, submit_s=300.0)
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=busy, pending=(old, big))
    policy = MultifactorPolicy(flat_speed_table(), weight_age=1000.0, weight_size=1000.0, max_age_s=1000.0)
    state = policy.new_state()
    # t=500: old 500 + 62.5 = 562.5, big 200 + 250 = 450
    assert tuple(policy.decide(snapshot, 500.0, state).order) == ("old", "big")
    # t=1100: old capped 1000 + 62.5 = 1062.5, big 800 + 250 = 1050
    assert tuple(policy.decide(snapshot, 1100.0, state).order) == ("old", "big")
    # t=1300: big capped 1000 + 250 = 1250
    assert tuple(policy.decide(snapshot, 1300.0, state).order) == ("big", "old")
