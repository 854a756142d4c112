"""Feature extraction: correct aggregates, and no information from the future."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import numpy as np
import pytest

from asrpt.predict.features import (
    COLUMN,
    FEATURE_NAMES,
    MISSING,
    JobRecord,
    adjust_hint,
    build_features,
    hint_accuracy,
    stable_code,
)

HISTORY_COLUMNS = [i for i, name in enumerate(FEATURE_NAMES) if name.split("_")[0] in ("group", "user")]


def job(job_id: str, submit: float, end: float | None, iterations: float | None, **kw) -> JobRecord:
    defaults = dict(user="u1", group="g1", accelerator_type="v100", accelerators=4.0)
    defaults.update(kw)
    return JobRecord(
        job_id=job_id, submit_time_s=submit, end_time_s=end, iterations=iterations, **defaults
    )


def random_trace(seed: int, n: int = 300) -> list[JobRecord]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        submit = rng.uniform(0, 10_000)
        finished = rng.random() < 0.9
        rows.append(
            job(
                str(i),
                round(submit),  # rounding makes equal submit/finish times common
                round(submit + rng.expovariate(1 / 500)) if finished else None,
                rng.choice([None, rng.uniform(1, 10_000)]) if finished else None,
                user=f"u{rng.randrange(5)}",
                group=rng.choice([None, *(f"g{k}" for k in range(8))]),
                accelerator_type=rng.choice(["v100", "A100", None]),
                iterations_hint=rng.choice([None, rng.uniform(1, 5000)]),
            )
        )
    return rows


def test_aggregates_of_a_small_history() -> None:
    rows = [
        job("a", 0, 100, 9.0),
        job("b", 10, 200, 99.0),
        job("c", 20, 300, 999.0, accelerator_type="a100"),
        job("d", 250, None, None),  # sees a and b only
        job("e", 400, None, None, user="u2"),  # sees a, b and c; other user
    ]
    X = build_features(rows)
    d, e = X[3], X[4]
    logs = [math.log(10), math.log(100), math.log(1000)]
    assert d[COLUMN["group_count"]] == 2
    assert d[COLUMN["group_mean"]] == pytest.approx(statistics.mean(logs[:2]))
    assert d[COLUMN["group_median"]] == pytest.approx(statistics.median(logs[:2]))
    assert d[COLUMN["group_last"]] == pytest.approx(logs[1])
    assert d[COLUMN["group_accel_count"]] == 2
    assert e[COLUMN["group_count"]] == 3
    assert e[COLUMN["group_median"]] == pytest.approx(logs[1])
    assert e[COLUMN["group_last"]] == pytest.approx(logs[2])
    assert e[COLUMN["group_accel_count"]] == 2  # v100 runs only (c ran on a100)
    assert e[COLUMN["user_count"]] == 0
    assert e[COLUMN["user_mean"]] == MISSING
    assert X[0, COLUMN["group_count"]] == 0


def test_a_job_finishing_exactly_at_submission_is_not_history() -> None:
    X = build_features([job("a", 0, 100, 50.0), job("b", 100, None, None)])
    assert X[1, COLUMN["group_count"]] == 0


def test_no_future_row_leaks_into_a_submissions_features() -> None:
    """Rewriting every job that finishes after a submission leaves that submission's features alone."""
    rows = random_trace(seed=1)
    X = build_features(rows)
    rng = random.Random(2)
    for probe in rng.sample(range(len(rows)), 25):
        t = rows[probe].submit_time_s
        changed = [
            dataclasses.replace(
                r,
                end_time_s=r.end_time_s + rng.uniform(0, 5000),
                iterations=rng.uniform(0, 1e6),
                accelerator_type_used="t4",
                iterations_hint=rng.uniform(1, 100),
            )
            if i != probe and r.end_time_s is not None and r.end_time_s >= t
            else r
            for i, r in enumerate(rows)
        ]
        assert np.array_equal(build_features(changed)[probe], X[probe])

    # And the check has teeth: changing a job that finished before the submission does change it.
    late = max(range(len(rows)), key=lambda i: rows[i].submit_time_s)
    earlier = [
        i for i, r in enumerate(rows)
        if r.end_time_s is not None and r.end_time_s < rows[late].submit_time_s
        and r.iterations is not None and r.user == rows[late].user
    ]
    changed = list(rows)
    changed[earlier[0]] = dataclasses.replace(rows[earlier[0]], iterations=rows[earlier[0]].iterations * 50)
    assert not np.array_equal(build_features(changed)[late], X[late])


def _brute_force(rows: list[JobRecord], i: int) -> dict[str, float]:
    """O(n) per row reference: filter the finished-before rows and aggregate directly."""
    me = rows[i]
    past = [
        r for r in rows
        if r.end_time_s is not None and r.iterations is not None and r.end_time_s < me.submit_time_s
    ]
    past.sort(key=lambda r: (r.end_time_s, rows.index(r)))
    out: dict[str, float] = {}
    selections = {
        "group": [r for r in past if me.group and r.group == me.group],
        "user": [r for r in past if r.user == me.user],
        "group_accel": [
            r for r in past
            if me.group and r.group == me.group
            and ((r.accelerator_type_used or r.accelerator_type or "").lower()
                 == (me.accelerator_type or "").lower())
        ],
    }
    for key, chosen in selections.items():
        values = [math.log1p(r.iterations) for r in chosen]
        out[f"{key}_count"] = len(values)
        if values:
            out[f"{key}_mean"] = statistics.fmean(values)
            out[f"{key}_median"] = statistics.median(values)
            out[f"{key}_last"] = values[-1]
    return out


def test_sweep_matches_brute_force() -> None:
    rows = random_trace(seed=3, n=200)
    X = build_features(rows)
    for i in range(len(rows)):
        for name, value in _brute_force(rows, i).items():
            assert X[i, COLUMN[name]] == pytest.approx(value, abs=1e-9), (i, name)


def test_row_order_does_not_matter() -> None:
    rows = random_trace(seed=4, n=120)
    order = list(range(len(rows)))
    random.Random(5).shuffle(order)
    X = build_features(rows)
    shuffled = build_features([rows[i] for i in order])
    assert np.array_equal(shuffled, X[order])


def test_request_features_and_codes() -> None:
    row = JobRecord(
        job_id="1",
        user="alice",
        submit_time_s=4 * 86_400 + 13 * 3600 + 5,  # Monday 1970-01-05, 13:00 UTC
        job_name="bert",
        group="g",
        partitions=("b", "a"),
        accelerators=8,
        accelerator_type="A100",
        parallel_data=2,
        parallel_pipeline=2,
        parallel_tensor=2,
        time_limit_s=3600,
    )
    x = build_features([row])[0]
    assert x.shape == (len(FEATURE_NAMES),)
    assert (x[COLUMN["submit_hour"]], x[COLUMN["submit_weekday"]]) == (13, 0)
    assert x[COLUMN["log_time_limit"]] == pytest.approx(math.log1p(3600))
    assert x[COLUMN["accelerator_type_code"]] == stable_code("a100")
    assert x[COLUMN["partition_code"]] == stable_code("a,b")
    assert x[COLUMN["log_hint"]] == MISSING and x[COLUMN["log_hint_adjusted"]] == MISSING
    assert x[COLUMN["model_name_code"]] == MISSING
    assert 0.0 <= stable_code("alice") < 1.0
    assert stable_code("alice") == stable_code("alice") != stable_code("bob")
    assert build_features([]).shape == (0, len(FEATURE_NAMES))


def test_hint_is_scaled_by_the_users_track_record() -> None:
    # This user states a tenth of what their jobs run; after a few jobs the hint is corrected.
    past = [
        job(str(i), i * 100, i * 100 + 50, 10_000.0 * (i + 1), group=f"g{i}", iterations_hint=1_000.0 * (i + 1))
        for i in range(5)
    ]
    new = job("new", 1000, None, None, group="fresh", iterations_hint=3_000.0)
    honest = job("other", 1000, None, None, user="u2", group="fresh2", iterations_hint=3_000.0)
    X = build_features([*past, new, honest])
    x, y = X[5], X[6]
    assert x[COLUMN["user_hint_count"]] == 5
    assert math.expm1(x[COLUMN["log_hint_adjusted"]]) == pytest.approx(30_000, rel=0.01)
    assert math.expm1(y[COLUMN["log_hint_adjusted"]]) == pytest.approx(3_000)
    accuracy = hint_accuracy([*past, new])
    assert accuracy["u1"].count == 5
    assert accuracy["u1"].median_ratio == pytest.approx(10.0, rel=0.01)
    assert hint_accuracy(past, as_of_s=50) == {}
    assert hint_accuracy(past, as_of_s=51)["u1"].count == 1
    assert adjust_hint(3_000, x[COLUMN["user_hint_log_ratio"]]) == pytest.approx(30_000, rel=0.01)
