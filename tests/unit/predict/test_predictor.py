"""IterationPredictor follows scikit-learn's conventions and the policies asrpt needs."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import clone, is_regressor
from sklearn.exceptions import NotFittedError

from asrpt.predict.features import COLUMN, FEATURE_NAMES, JobRecord, build_features
from asrpt.predict.predictor import IterationPredictor, raise_underestimate, trusted_hint_log


def synthetic_history(n_groups: int = 30, runs: int = 6, seed: int = 0) -> list[JobRecord]:
    """Groups with a characteristic length (log-uniform), runs spread over time, +-10% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    t = 0.0
    lengths = np.exp(rng.uniform(np.log(100), np.log(100_000), n_groups))
    for run in range(runs):
        for g in range(n_groups):
            t += 60.0
            iterations = float(lengths[g] * rng.uniform(0.9, 1.1))
            rows.append(
                JobRecord(
                    job_id=f"{run}-{g}",
                    user=f"user{g % 5}",
                    group=f"group{g}",
                    submit_time_s=t,
                    end_time_s=t + 30.0,
                    iterations=iterations,
                    accelerators=float(2 ** (g % 4)),
                    accelerator_type="v100",
                )
            )
    return rows


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rows = synthetic_history()
    return build_features(rows), np.array([r.iterations for r in rows])


def small(**params) -> IterationPredictor:
    return IterationPredictor(n_estimators=20, random_state=0, **params)


def test_estimator_conventions(data) -> None:
    X, y = data
    model = small(max_depth=6)
    assert is_regressor(model)
    params = model.get_params()
    assert params["max_depth"] == 6 and params["unseen_policy"] == "fallback"
    copy = clone(model)
    assert copy is not model and copy.get_params() == params
    assert not [name for name in vars(model) if name.endswith("_")]  # __init__ stores params only

    with pytest.raises(NotFittedError):
        model.predict(X)
    assert model.fit(X, y) is model
    fitted = {name for name in vars(model) if name.endswith("_") and not name.startswith("_")}
    assert {"forest_", "global_median_", "sklearn_version_", "n_features_in_"} <= fitted
    assert clone(model).get_params() == params and not hasattr(clone(model), "forest_")

    restored = pickle.loads(pickle.dumps(model))
    assert np.array_equal(restored.predict(X), model.predict(X))
    assert np.array_equal(small(max_depth=6).fit(X, y).predict(X), model.predict(X))  # random_state


def test_tree_size_is_bounded(data) -> None:
    X, y = data
    model = small(max_depth=4, min_samples_leaf=3).fit(X, y)
    assert max(tree.get_depth() for tree in model.forest_.estimators_) <= 4
    assert all(
        tree.tree_.n_node_samples[tree.tree_.children_left == -1].min() >= 3
        for tree in model.forest_.estimators_
    )


def test_input_validation(data) -> None:
    X, y = data
    with pytest.raises(ValueError, match="unseen_policy"):
        small(unseen_policy="guess").fit(X, y)
    with pytest.raises(ValueError, match="columns"):
        small().fit(X[:, :5], y)
    with pytest.raises(ValueError, match=">= 0"):
        small().fit(X, -y)
    model = small().fit(X, y)
    with pytest.raises(ValueError):
        model.predict(X[:, :-1])


def test_recurring_jobs_are_predicted_from_their_group(data) -> None:
    X, y = data
    recurring = X[:, COLUMN["group_count"]] > 0
    model = small().fit(X[: len(X) // 2], y[: len(y) // 2])
    test = np.arange(len(X)) >= len(X) // 2
    predicted = model.predict(X[test & recurring])
    ape = np.abs(predicted - y[test & recurring]) / y[test & recurring]
    assert np.median(ape) < 0.15  # runs vary +-10% around their group's length
    assert np.all(predicted >= 0)


def _unseen_row(user: str, hint: float | None, history: list[JobRecord]) -> np.ndarray:
    """Features of a brand-new group's job submitted after ``history``."""
    new = JobRecord(
        job_id="new",
        user=user,
        group="never-seen",
        submit_time_s=1e9,
        accelerators=1.0,
        accelerator_type="v100",
        iterations_hint=hint,
    )
    return build_features([*history, new])[-1:]


def test_unseen_policies() -> None:
    history = synthetic_history()
    X = build_features(history)
    y = np.array([r.iterations for r in history])
    known_user = _unseen_row("user1", None, history)
    stranger = _unseen_row("nobody", None, history)
    assert known_user[0, COLUMN["group_count"]] == 0

    zero = small(unseen_policy="zero").fit(X, y)
    assert zero.predict(known_user)[0] == 0.0
    assert zero.predict(stranger)[0] == 0.0
    assert zero.unseen_mask(stranger).tolist() == [True]

    fallback = small(unseen_policy="fallback").fit(X, y)
    user1 = [r.iterations for r in history if r.user == "user1"]
    # Medians are taken of log1p values (an even count averages the middle two in log space).
    expected = np.expm1(np.median(np.log1p(user1)))
    assert fallback.predict(known_user)[0] == pytest.approx(expected, rel=1e-9)
    assert fallback.predict(stranger)[0] == pytest.approx(np.median(y))
    assert fallback.global_median_ == pytest.approx(np.median(y))

    model = small(unseen_policy="model").fit(X, y)
    assert model.predict(stranger)[0] > 0

    # Recurring jobs are unaffected by the policy.
    recurring = X[X[:, COLUMN["group_count"]] > 0]
    assert np.array_equal(zero.predict(recurring), fallback.predict(recurring))


def test_hint_is_the_starting_prediction_and_habitual_understatement_stops_paying() -> None:
    history = synthetic_history()
    # user0 states a quarter of what their jobs then run.
    history = [
        JobRecord(**{**_as_dict(r), "iterations_hint": r.iterations / 4 if r.user == "user0" else None})
        for r in history
    ]
    X = build_features(history)
    y = np.array([r.iterations for r in history])
    for policy in ("zero", "fallback", "model"):
        model = small(unseen_policy=policy).fit(X, y)
        understater = model.predict(_unseen_row("user0", 1_000.0, history))[0]
        understater_plain = model.predict(_unseen_row("user0", None, history))[0]
        newcomer = model.predict(_unseen_row("nobody", 1_000.0, history))[0]
        newcomer_plain = model.predict(_unseen_row("nobody", None, history))[0]
        # user0's 36 hinted jobs earn most of the corrected hint (4,000), in log space.
        count = _unseen_row("user0", 1_000.0, history)[0, COLUMN["user_hint_count"]]
        weight = count / (count + 3.0)
        if np.log1p(4_000.0) >= np.log1p(understater_plain):
            assert understater == pytest.approx(4_000.0, rel=0.02), policy
        else:
            expected = np.expm1(np.log1p(understater_plain) + weight * (np.log1p(4_000.0) - np.log1p(understater_plain)))
            assert understater == pytest.approx(expected, rel=0.02), policy
        # A newcomer's hint counts only when it claims more than the estimate without it.
        assert newcomer == pytest.approx(max(1_000.0, newcomer_plain)), policy


def _as_dict(row: JobRecord) -> dict:
    return {name: getattr(row, name) for name in row.__dataclass_fields__}


@pytest.mark.parametrize(
    ("predicted", "attained", "expected"),
    [
        (100.0, 0.0, 100.0),  # not started: keep
        (100.0, 99.9, 100.0),  # within the prediction: keep
        (100.0, 100.0, 200.0),  # reached it: double
        (100.0, 250.0, 400.0),  # far past it: double until ahead again
        (100.0, 399.0, 400.0),
        (100.0, 400.0, 800.0),
        (0.0, 0.0, 1.0),  # the paper's zero for unseen jobs: start doubling from the floor
        (0.0, 5.0, 8.0),
        (3.0, 1e12, 3.0 * 2.0**39),
    ],
)
def test_raise_underestimate_doubles(predicted: float, attained: float, expected: float) -> None:
    assert raise_underestimate(predicted, attained) == pytest.approx(expected)


def test_raise_underestimate_is_minimal_and_validates() -> None:
    rng = np.random.default_rng(7)
    for predicted, attained in rng.uniform(0, 1e6, size=(500, 2)):
        raised = raise_underestimate(predicted, attained, factor=1.5)
        if attained < predicted:
            assert raised == predicted
            continue
        assert raised > attained
        assert raised / 1.5 <= attained or math.isclose(raised, max(predicted, 1.0))
    with pytest.raises(ValueError):
        raise_underestimate(10, 20, factor=1.0)
    with pytest.raises(ValueError):
        raise_underestimate(math.nan, 20)


def test_feature_width_matches_names() -> None:
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) == len(COLUMN)


def test_model_cache_refuses_writable_places_and_other_versions(data, tmp_path, monkeypatch) -> None:
    from asrpt.predict import persist

    X, y = data
    model = small().fit(X, y)
    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    path = folder / "model.pkl"
    persist.save_model(model, path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert np.array_equal(persist.load_model(path).predict(X), model.predict(X))
    assert persist.load_model(folder / "absent.pkl") is None

    folder.chmod(0o777)  # anyone could have swapped the file
    assert persist.load_model(path) is None
    folder.chmod(0o755)
    path.chmod(0o622)
    assert persist.load_model(path) is None
    path.chmod(0o600)

    monkeypatch.setattr(persist.sklearn, "__version__", "0.0-other")
    assert persist.load_model(path) is None



@pytest.fixture(scope="module")
def fitted(data) -> IterationPredictor:
    return small().fit(*data)


def reference_predict(model: IterationPredictor, X: np.ndarray) -> np.ndarray:
    """The prediction as first written: scikit-learn's forest on every row, then the
    unseen-job overrides."""
    unseen = X[:, COLUMN["group_count"]] <= 0
    hinted = unseen & (X[:, COLUMN["log_hint_adjusted"]] != -1.0)
    plain = X.copy()  # the hinted rows as if they had no hint (issue 16: hints are earned)
    plain[np.ix_(hinted, [COLUMN["log_hint"], COLUMN["log_hint_adjusted"]])] = -1.0
    reference = model._reference_log(plain)
    predicted = np.clip(np.expm1(reference + model.forest_.predict(plain)), 0.0, None)
    if model.unseen_policy == "zero":
        predicted[unseen] = 0.0
    elif model.unseen_policy == "fallback":
        predicted[unseen] = np.expm1(reference[unseen])
    predicted[hinted] = np.expm1(trusted_hint_log(
        np.log1p(predicted[hinted]), X[hinted, COLUMN["log_hint_adjusted"]], X[hinted, COLUMN["user_hint_count"]]
    ))
    return predicted


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 80),
    policy=st.sampled_from(["zero", "fallback", "model"]),
    unseen_share=st.floats(0, 1),
)
def test_predict_unchecked_is_the_forests_own_predict(
    data, fitted, seed: int, rows: int, policy: str, unseen_share: float
) -> None:
    """The tree walk for a few rows (up to 64; beyond, scikit-learn's own predict) and the
    forest skipped for rows an unseen-job rule decides give bit for bit the first version."""
    X, _ = data
    rng = np.random.default_rng(seed)
    # Training rows, perturbed, with some features missing: both sides of many splits.
    sample = X[rng.integers(0, len(X), rows)] * rng.uniform(0.5, 1.5, (rows, X.shape[1]))
    sample[rng.random(sample.shape) < 0.1] = -1.0
    unseen = rng.random(rows) < unseen_share
    sample[unseen, COLUMN["group_count"]] = 0.0
    sample[unseen & (rng.random(rows) < 0.5), COLUMN["log_hint_adjusted"]] = rng.uniform(0, 12)
    model = copy.copy(fitted).set_params(unseen_policy=policy)  # the same trees, another rule
    np.testing.assert_array_equal(model._forest_mean(sample), model.forest_.predict(sample))
    np.testing.assert_array_equal(model.predict_unchecked(sample), reference_predict(model, sample))
    np.testing.assert_array_equal(model.predict(sample), reference_predict(model, sample))


def _limited_unseen_row(limit_s: float | None, history: list[JobRecord]) -> np.ndarray:
    new = JobRecord(job_id="new", user="nobody", group="never-seen", submit_time_s=1e9, accelerators=1.0,
                    accelerator_type="v100", time_limit_s=limit_s)
    return build_features([*history, new])[-1:]


def _with_limits(history: list[JobRecord], factor: float) -> list[JobRecord]:
    """Every run requested ``factor`` x its iterations as a time limit (seconds)."""
    return [JobRecord(**{**_as_dict(r), "time_limit_s": r.iterations * factor}) for r in history]


def test_time_limit_reference_scales_the_limit_by_the_typical_ratio() -> None:
    history = _with_limits(synthetic_history(), 6.0)
    X = build_features(history)
    y = np.array([r.iterations for r in history])
    model = small(unseen_policy="fallback", unseen_reference="time_limit").fit(X, y)
    assert math.exp(model.limit_log_ratio_) == pytest.approx(1 / 6, rel=0.05)
    # A limit of 60,000 s from a user who over-requests 6x: about 10,000 iterations, in
    # log1p space (the ratio is a median of log1p differences).
    assert model.predict(_limited_unseen_row(60_000.0, history))[0] == pytest.approx(10_000.0, rel=0.05)
    # Longer limits predict longer runs; without a limit the history reference stays.
    assert model.predict(_limited_unseen_row(600_000.0, history))[0] > model.predict(_limited_unseen_row(60_000.0, history))[0]
    history_ref = small(unseen_policy="fallback").fit(X, y)
    no_limit = _limited_unseen_row(None, history)
    assert model.predict(no_limit)[0] == pytest.approx(history_ref.predict(no_limit)[0])
    # Recurring jobs keep their group reference (the trees differ: they learn other residuals).
    recurring = X[X[:, COLUMN["group_count"]] > 0]
    assert np.array_equal(model._reference_log(recurring), history_ref._reference_log(recurring))


def test_unseen_residual_clip_lets_the_request_move_an_unseen_prediction_further() -> None:
    """Unseen runs are 100x the global median; a clip of 1 keeps the correction within e."""
    history = synthetic_history()
    rows = [JobRecord(**{**_as_dict(r), "group": f"once-{i}", "accelerators": 64.0}) if i % 2 else r
            for i, r in enumerate(history)]
    y = np.array([r.iterations * (100.0 if i % 2 else 1.0) for i, r in enumerate(rows)])
    rows = [JobRecord(**{**_as_dict(r), "iterations": float(v)}) for r, v in zip(rows, y)]
    X = build_features(rows)
    unseen = X[:, COLUMN["group_count"]] <= 0
    tight = small(unseen_policy="model", residual_clip=1.0).fit(X, y)
    loose = small(unseen_policy="model", residual_clip=1.0, unseen_residual_clip=6.0).fit(X, y)
    reference = np.expm1(tight._reference_log(X[unseen]))
    assert np.all(tight.predict(X[unseen]) <= (reference + 1) * math.e + 1e-6)
    assert np.median(loose.predict(X[unseen]) / reference) > 2 * np.median(tight.predict(X[unseen]) / reference)
    with pytest.raises(ValueError, match="unseen_residual_clip"):
        small(unseen_residual_clip=0.0).fit(X, y)


def test_estimates_mean_and_lognormal_are_at_least_the_median(data) -> None:
    """Same trees: the linear-space mean over trees and exp(mu + sigma^2/2) are never below
    the log-space mean (Jensen), and equal it for a forest of one tree."""
    X, y = data
    fitted = small(unseen_policy="model").fit(X, y)
    median = fitted.predict(X)
    mean = copy.copy(fitted).set_params(estimate="mean").predict(X)
    lognormal = copy.copy(fitted).set_params(estimate="lognormal").predict(X)
    assert np.all(mean >= median * (1 - 1e-12)) and np.all(lognormal >= median * (1 - 1e-12))
    assert np.any(mean > median * 1.001)
    reference = fitted._reference_log(X)
    per_tree = reference[:, None] + fitted._per_tree(X)
    np.testing.assert_allclose(mean, np.expm1(per_tree).mean(axis=1))
    one = IterationPredictor(n_estimators=1, random_state=0, unseen_policy="model").fit(X, y)
    np.testing.assert_allclose(copy.copy(one).set_params(estimate="mean").predict(X), one.predict(X), rtol=1e-6)
    with pytest.raises(ValueError, match="estimate"):
        small(estimate="mode").fit(X, y)


def _row(job_id: str, user: str, group: str, t: float, iterations: float | None, hint: float | None = None,
         limit_s: float | None = 7200.0) -> JobRecord:
    return JobRecord(job_id=job_id, user=user, group=group, submit_time_s=t, end_time_s=None if iterations is None else t + 30.0,
                     iterations=iterations, accelerators=1.0, accelerator_type="v100", iterations_hint=hint, time_limit_s=limit_s)


def _gaming_history() -> list[JobRecord]:
    """The synthetic groups, a known short job (kim's "short", 200 iterations, six runs), and
    ann, whose hints on six new scripts were each what the job then ran."""
    history = _with_limits(synthetic_history(), 6.0)
    t = history[-1].submit_time_s
    for i in range(6):
        history.append(_row(f"kim{i}", "kim", "short", t + 100 * i, 200.0, limit_s=3600.0))
        history.append(_row(f"ann{i}", "ann", f"ann-script-{i}", t + 100 * i + 50, 5_000.0 * (i + 1), hint=5_000.0 * (i + 1)))
    return history


def _predict_new(model: IterationPredictor, history: list[JobRecord], *rows: JobRecord) -> list[float]:
    X = build_features([*history, *rows])[len(history):]
    return [float(v) for v in model.predict(X)]


@pytest.mark.parametrize("policy", ["fallback", "model"])
@pytest.mark.parametrize("reference", ["history", "time_limit"])
def test_a_hint_counts_only_as_far_as_the_users_track_record_earns_it(policy, reference) -> None:
    """Issue 16, gaming: `#ASRPT iterations=1` on a new script from a user with no track
    record must not put it ahead of a known short job; a user whose hints were accurate gets
    credit for hers; a hint that a job runs *longer* counts for anyone (it gains nothing)."""
    history = _gaming_history()
    X = build_features(history)
    y = np.array([r.iterations for r in history])
    model = small(unseen_policy=policy, unseen_reference=reference).fit(X, y)
    t = 1e9
    known, gamer, gamer_plain, honest, honest_plain, long_claim = _predict_new(
        model, history,
        _row("k", "kim", "short", t, None, limit_s=3600.0),
        _row("m1", "mallory", "new-a", t, None, hint=1.0),
        _row("m2", "mallory", "new-a", t, None),
        _row("a1", "ann", "ann-new", t, None, hint=20.0),
        _row("a2", "ann", "ann-new", t, None),
        _row("m3", "mallory", "new-c", t, None, hint=1e7),
    )
    assert known == pytest.approx(200.0, rel=0.3)
    assert gamer >= known, "a newcomer's iterations=1 jumped ahead of a known short job"
    assert gamer == pytest.approx(gamer_plain, rel=1e-9)  # no track record: the hint earns nothing
    assert honest < known < honest_plain  # an accurate record earns the hint credit
    assert honest >= 20.0
    assert long_claim == pytest.approx(1e7, rel=0.01)
