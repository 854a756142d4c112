"""Virtual single-machine SRPT: hand-checked schedules, persistence and the lower bound."""

import math

import pytest

from asrpt.core.srpt import (
    VirtualSRPT,
    id_sort_key,
    srpt_completion_times,
    srpt_lower_bound_total_jct_s,
    virtual_size_s,
)


@pytest.mark.parametrize(
    "jobs, expected",
    [
        # one job: ends at release + size
        ([("1", 0.0, 5.0)], {"1": 5.0}),
        # both at 0: shorter first
        ([("1", 0.0, 5.0), ("2", 0.0, 3.0)], {"2": 3.0, "1": 8.0}),
        # a short arrival preempts a long running job
        ([("1", 0.0, 10.0), ("2", 2.0, 1.0)], {"2": 3.0, "1": 11.0}),
        # a longer arrival does not preempt
        ([("1", 0.0, 4.0), ("2", 1.0, 10.0)], {"1": 4.0, "2": 14.0}),
        # idle gap before a late release
        ([("1", 0.0, 1.0), ("2", 5.0, 1.0)], {"1": 1.0, "2": 6.0}),
        # tie on remaining: earlier release first, then smaller numeric id (9 before 10)
        ([("10", 0.0, 2.0), ("9", 0.0, 2.0)], {"9": 2.0, "10": 4.0}),
        # zero-size jobs complete at release
        ([("1", 3.0, 0.0)], {"1": 3.0}),
    ],
)
def test_hand_checked_schedules(jobs, expected):
    assert srpt_completion_times(jobs) == pytest.approx(expected)


def test_seed_counterexample_virtual_order():
    """First seed: G=100, A g=1 n=100000, B g=50 n=2000, alpha=1: both virtual 1000 s."""
    a = virtual_size_s(1, 100000, 1.0, 100)
    b = virtual_size_s(50, 2000, 1.0, 100)
    assert a == b == 1000.0
    done = srpt_completion_times([("A", 0.0, a), ("B", 0.0, b)])
    assert done == {"A": 1000.0, "B": 2000.0}


def test_incremental_advance_matches_batch():
    jobs = [("1", 0.0, 10.0), ("2", 2.0, 1.0), ("3", 2.5, 4.0), ("4", 30.0, 2.0)]
    machine = VirtualSRPT()
    seen = {}
    for t in [0.0, 1.0, 2.0, 2.5, 3.0, 7.0, 29.0, 31.0, 100.0]:
        for job_id, rel, size in jobs:
            if rel <= t and job_id not in seen:
                machine.release(job_id, rel, size)
                seen[job_id] = True
        machine.advance_to(t)
    assert dict((j, c) for c, j in machine.completed) == pytest.approx(srpt_completion_times(jobs))


def test_late_announcement_is_released_at_the_clock():
    machine = VirtualSRPT()
    machine.release("1", 0.0, 5.0)
    machine.advance_to(10.0)
    machine.release("2", 3.0, 1.0)  # seen late: cannot go back in virtual time
    machine.advance_to(20.0)
    assert machine.completed == [(5.0, "1"), (11.0, "2")]


def test_resize_and_remove():
    machine = VirtualSRPT()
    machine.release("1", 0.0, 10.0)
    machine.release("2", 0.0, 20.0)
    machine.advance_to(4.0)
    assert machine.remaining_s("1") == pytest.approx(6.0)
    machine.resize("1", new_size_s=30.0, old_size_s=10.0)  # prediction raised: now 26 left
    assert machine.remaining_s("1") == pytest.approx(26.0)
    machine.remove("2")
    machine.advance_to(100.0)
    assert machine.completed == [(30.0, "1")]


def test_state_round_trip_continues_the_same_schedule():
    jobs = [("1", 0.0, 10.0), ("2", 1.0, 3.0), ("3", 50.0, 2.0)]
    reference = srpt_completion_times(jobs)
    machine = VirtualSRPT()
    for job in jobs:
        machine.release(*job)
    machine.advance_to(2.0)
    restored = VirtualSRPT.from_dict(machine.to_dict())
    restored.advance_to(math.inf)
    assert dict((j, c) for c, j in restored.completed) == pytest.approx(reference)


def test_clock_never_goes_back():
    machine = VirtualSRPT()
    machine.advance_to(5.0)
    with pytest.raises(ValueError):
        machine.advance_to(4.0)


def test_lower_bound_sums_flow_times():
    jobs = [("1", 0.0, 10.0), ("2", 2.0, 1.0)]
    assert srpt_lower_bound_total_jct_s(jobs) == pytest.approx((11.0 - 0.0) + (3.0 - 2.0))


def test_id_sort_key_orders_numbers_numerically():
    assert sorted(["10", "9", "b", "a"], key=id_sort_key) == ["9", "10", "a", "b"]


def test_tie_rounded_merges_float_noise_and_keeps_real_differences():
    from hypothesis import given, strategies as st

    from asrpt.core.srpt import tie_rounded

    assert tie_rounded(25.0) == tie_rounded(24.999999999999996)
    assert tie_rounded(0.0) == 0.0 and tie_rounded(math.inf) == math.inf

    @given(st.floats(1e-6, 1e9))
    def close_and_monotone(x):
        assert abs(tie_rounded(x) - x) <= 1e-9 * x
        assert tie_rounded(x) <= tie_rounded(x * (1 + 4e-9))  # never reorders real differences
        assert tie_rounded(x) < tie_rounded(x * (1 + 4e-9)) or x * (1 + 4e-9) == x

    close_and_monotone()
