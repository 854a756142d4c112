"""The dispatch memo keeps running jobs' expected ends sorted across decisions; whatever the
running tuples it is handed (jobs ending, starting, reordered, outliving their estimates),
the releases must be exactly those worked out afresh, in the same order (ties by place in
the tuple), or reservations would move."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.dispatch import DispatchMemo, _expected_releases
from asrpt.core.model import Placement, RunningJob
from tests.helpers import flat_job


def _believed_runtime_s(job, iteration_time_s: float) -> float:
    return (job.predicted_iterations or 0.0) * iteration_time_s


def _pool(draws: list[tuple[int, int]]) -> list[RunningJob]:
    return [
        RunningJob(
            job=flat_job(f"j{i}", 1, float(iterations)),
            placement=Placement(job_id=f"j{i}", partition="p", worker_nodes=(f"n{i % 3}",), iteration_time_s=1.0),
            start_time_s=float(start_s),
        )
        for i, (start_s, iterations) in enumerate(draws)
    ]


# Few distinct starts and runtimes: many equal expected ends, so tie order is exercised.
running_jobs = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=12)
steps = st.lists(
    st.tuples(st.lists(st.integers(0, 11), max_size=12, unique=True), st.booleans(), st.integers(0, 3)),
    min_size=1, max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(draws=running_jobs, plan=steps)
def test_remembered_releases_equal_fresh_ones(draws, plan):
    pool = _pool(draws)
    memo = DispatchMemo()
    now_s = 0.0
    for chosen, in_start_order, advance_s in plan:
        members = [i for i in chosen if i < len(pool)]
        if in_start_order:
            members.sort()  # as a backend's dict of running jobs keeps them
        running = tuple(pool[i] for i in members)
        now_s += advance_s
        remembered = _expected_releases(running, now_s, _believed_runtime_s, memo)
        fresh = _expected_releases(running, now_s, _believed_runtime_s, None)
        assert [(end_s, id(counts)) for end_s, _, counts in remembered] == \
            [(end_s, id(counts)) for end_s, _, counts in fresh]
