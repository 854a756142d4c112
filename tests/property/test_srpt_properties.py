"""Virtual SRPT invariants: a permutation of released jobs, optimal against simple
alternatives, and the same schedule however often it is looked at."""

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.srpt import VirtualSRPT, srpt_completion_times

job_lists = st.lists(
    st.tuples(st.floats(0.0, 1000.0), st.floats(0.0, 500.0)), min_size=1, max_size=30
).map(lambda rows: [(str(i), rel, size) for i, (rel, size) in enumerate(rows)])


def _fifo_total_completion_s(jobs):
    t, total = 0.0, 0.0
    for _, rel, size in sorted(jobs, key=lambda j: (j[1], int(j[0]))):
        t = max(t, rel) + size
        total += t
    return total


@settings(max_examples=200, deadline=None)
@given(jobs=job_lists)
def test_order_is_a_permutation_and_never_early(jobs):
    done = srpt_completion_times(jobs)
    assert sorted(done) == sorted(j for j, _, _ in jobs)
    for job_id, rel, size in jobs:
        assert done[job_id] >= rel + size - 1e-6


@settings(max_examples=200, deadline=None)
@given(jobs=job_lists)
def test_srpt_beats_fifo_on_total_completion(jobs):
    assert sum(srpt_completion_times(jobs).values()) <= _fifo_total_completion_s(jobs) + 1e-6


@settings(max_examples=100, deadline=None)
@given(jobs=job_lists, looks=st.lists(st.floats(0.0, 3000.0), max_size=20))
def test_looking_more_often_changes_nothing(jobs, looks):
    """A daemon cycling every few seconds and a simulator stepping per event agree."""
    machine = VirtualSRPT()
    released = set()
    for t in sorted(looks) + [float("inf")]:
        for job_id, rel, size in jobs:
            if job_id not in released and rel <= t:
                machine.release(job_id, rel, size)
                released.add(job_id)
        remaining_before = {j: machine.remaining_s(j) for j in released}
        machine.advance_to(t)
        for j in released:  # remaining work never grows while time passes
            after = machine.remaining_s(j)
            assert after is not None and after <= remaining_before[j] + 1e-9
    expected = srpt_completion_times(jobs)
    got = {j: c for c, j in machine.completed}
    assert got.keys() == expected.keys()
    for j in expected:
        assert abs(got[j] - expected[j]) < 1e-6
