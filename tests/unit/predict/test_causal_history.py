"""CausalHistory (features kept up to date as jobs finish) equals a from-scratch rebuild.

The simulator's random-forest predictor featurises each arrival from it instead of calling
``build_features`` over the whole finished history; these tests replay random clocks and
compare, bit for bit, at every submission, and check that nothing finished at or after a
submission reaches its features.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.predict.features import CausalHistory, JobRecord, build_features

# Small integer times make the ties that matter common: a run finishing at the very second
# another is submitted, several runs finishing together.
_rows = st.lists(
    st.builds(
        lambda i, submit, run, iterations, user, group, accel, hint, used: JobRecord(
            job_id=str(i),
            user=f"u{user}",
            group=None if group is None else f"g{group}",
            submit_time_s=float(submit),
            end_time_s=None if run is None else float(submit + run),
            iterations=iterations if run is not None else None,
            accelerator_type=accel,
            iterations_hint=hint,
            accelerator_type_used=used,
        ),
        i=st.integers(0, 10**6),
        submit=st.integers(0, 40),
        run=st.one_of(st.none(), st.integers(0, 15)),
        iterations=st.one_of(st.none(), st.floats(0, 1e6), st.just(-1.0)),
        user=st.integers(0, 3),
        group=st.one_of(st.none(), st.integers(0, 4)),
        accel=st.sampled_from([None, "v100", "A100", "a100"]),
        hint=st.one_of(st.none(), st.floats(0, 1e5)),
        used=st.sampled_from([None, "v100", "T4"]),
    ),
    max_size=60,
).map(lambda rows: [dataclasses.replace(r, job_id=f"{k}") for k, r in enumerate(rows)])


def replay(rows: list[JobRecord]) -> list[tuple[str, JobRecord]]:
    """The events a clock delivers: at each time, finishes first, then submissions (the
    simulator's order, the one that makes strictness matter)."""
    events = [(r.submit_time_s, 1, k, "submit", r) for k, r in enumerate(rows)]
    events += [(r.end_time_s, 0, k, "finish", r) for k, r in enumerate(rows) if r.end_time_s is not None]
    return [(kind, row) for *_, kind, row in sorted(events, key=lambda e: e[:3])]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows)
def test_each_submission_gets_exactly_the_rebuilt_row(rows: list[JobRecord]) -> None:
    history = CausalHistory()
    finished: list[JobRecord] = []
    for kind, row in replay(rows):
        if kind == "finish":
            history.add_finished(row)
            finished.append(row)
            continue
        incremental = history.features(row)
        rebuilt = build_features([*finished, row])[-1]
        assert incremental is not None
        np.testing.assert_array_equal(incremental, rebuilt)
        # Strictness: what finished at or after the submission is not in it.
        before = [f for f in finished if f.end_time_s < row.submit_time_s]
        np.testing.assert_array_equal(incremental, build_features([*before, row])[-1])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, future=_rows)
def test_no_future_run_leaks_into_a_submission(rows: list[JobRecord], future: list[JobRecord]) -> None:
    """Runs finished at or after the submission (already handed over by the clock) change nothing."""
    if not rows:
        return
    *past, own = rows
    submit_s = own.submit_time_s
    past = sorted(
        (r for r in past if r.end_time_s is not None and r.end_time_s < submit_s), key=lambda r: r.end_time_s
    )
    late = sorted(
        (dataclasses.replace(r, job_id=f"f{r.job_id}", end_time_s=submit_s + (r.end_time_s or 0.0) % 7.0) for r in future),
        key=lambda r: r.end_time_s,
    )
    with_future, without = CausalHistory(), CausalHistory()
    for row in past:
        with_future.add_finished(row)
        without.add_finished(row)
    for row in late:
        with_future.add_finished(row)
    np.testing.assert_array_equal(with_future.features(own), without.features(own))


def test_a_submission_older_than_folded_history_is_refused() -> None:
    history = CausalHistory()
    history.add_finished(JobRecord(job_id="a", user="u", group="g", submit_time_s=0.0, end_time_s=5.0, iterations=9.0))
    assert history.features(JobRecord(job_id="b", user="u", group="g", submit_time_s=10.0)) is not None
    # "a" (ended at 5) is folded in now; a job submitted at 5 must not see it.
    assert history.features(JobRecord(job_id="c", user="u", group="g", submit_time_s=5.0)) is None
    with pytest.raises(ValueError, match="end-time order"):
        history.add_finished(JobRecord(job_id="d", user="u", submit_time_s=0.0, end_time_s=4.0, iterations=1.0))
