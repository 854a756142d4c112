"""The random-forest iteration predictor, as a scikit-learn estimator.

``X`` is the matrix of :func:`asrpt.predict.features.build_features` (columns
:data:`~asrpt.predict.features.FEATURE_NAMES`), ``y`` the iterations (or the stand-in target
of a trace). Everything is learnt in ``log1p`` space: iteration counts span orders of
magnitude and a squared error on raw counts would fit the few longest jobs only.

The forest does not learn log iterations from scratch but a correction to a *reference*:
the median of the most specific history the job has (its group on the same accelerator
type, else its group, else its user, else the training median). Trees approximate the
near-identity map "a recurring job runs about as long as its group did" poorly with a few
hundred distinct groups, and on the PAI trace a forest on raw targets lost to the group
median it was given as a feature; learning the residual keeps that baseline and lets the
forest adjust it from the request (accelerators, type, time limit, hint) and the other
aggregates. The residual target is clipped to ``+-residual_clip`` so that a rerun that
crashed after seconds does not drag its neighbours' predictions down.

Jobs whose group has no finished history are *unseen*. For them the user's hint, scaled by
that user's median actual/hint ratio, counts as far as the user's track record earns it
(:func:`trusted_hint_log`: a hint of a longer run counts fully, a shorter one only by the
weight of the user's finished hinted jobs, none for a user without any, so a new script's
``iterations=1`` is not a way past known jobs); without a hint ``unseen_policy`` decides: ``"zero"`` is the A-SRPT paper's choice (predict 0 so that new jobs run first and
reveal their length quickly, with :func:`raise_underestimate` correcting the order as they
run), ``"fallback"`` uses the median chain alone (group, then user, then global), and
``"model"`` applies the forest's correction to it as for any other job.

``estimate`` is which point of the trees' distribution a prediction is. ``"median"`` (the
paper's forest, and the default before issue 15) averages the trees in log space, about the
median run. A non-preemptive order minimises mean completion time by *expected* work, and a
right-skewed run length has a mean above its median, the more so the less the model knows:
``"mean"`` averages the trees' predictions in linear space (each tree a sample of the
conditional run length), ``"lognormal"`` is exp(mu + sigma^2/2) with mu the trees' mean in
log space and sigma^2 their variance plus the forest's out-of-bag error variance (the scatter
of runs around the prediction, which the trees' disagreement alone misses).
"""

from __future__ import annotations

import math

import numpy as np
import sklearn
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.utils.validation import check_is_fitted, validate_data

from asrpt.core.prediction import ESTIMATES, UNSEEN_POLICIES, UNSEEN_REFERENCES  # re-exported
from asrpt.predict.features import COLUMN, FEATURE_NAMES, MISSING


#: Up to this many rows, :meth:`IterationPredictor._forest_mean` walks the trees itself; beyond
#: it scikit-learn's batched (and, with ``n_jobs``, parallel) predict is the faster.
_DIRECT_ROWS = 64

#: History keys of the reference median, least specific first.
REFERENCE_CHAIN: tuple[str, ...] = ("user", "group", "group_accel")


class IterationPredictor(RegressorMixin, BaseEstimator):
    """Predicts a job's training iterations from its submission and its causal history.

    Parameters
    ----------
    n_estimators:
        Trees in the forest.
    max_depth, min_samples_leaf:
        Bound the size of each tree, and so of the model in memory and on disk.
    max_features:
        Features considered per split (scikit-learn's meaning).
    residual_clip:
        Bound on the learnt correction to the reference, in log1p units (1.0 is a factor of
        about e either way).
    unseen_reference:
        Reference of rows without group history: ``"history"`` (the user's median, else the
        global one) or ``"time_limit"`` (the requested time limit scaled by the median
        log ratio of iterations to time limit over the training jobs: a limit is a hard upper
        bound on the run and users over-request it by a typical factor; rows without a limit
        keep the history reference).
    unseen_residual_clip:
        The same bound for rows without group history (None: ``residual_clip``). Their
        reference is only the user's or the global median, so the request (accelerators, time
        limit) must be able to move the prediction further than a rerun's crash should.
    random_state:
        Seed passed to the forest, for reproducible fits.
    unseen_policy:
        What to predict for a job without group history and without a hint:
        ``"zero"``, ``"fallback"`` or ``"model"`` (see the module docstring).
    n_jobs:
        Parallel workers for fitting and predicting (scikit-learn's meaning).
    estimate:
        ``"median"``, ``"mean"`` or ``"lognormal"``: which point of the trees' distribution
        a prediction is (see the module docstring).

    Attributes
    ----------
    forest_ : RandomForestRegressor
        The fitted forest (on the clipped log1p residual over the reference).
    global_median_ : float
        Median iterations of the training jobs, the last step of the fallback chain.
    sklearn_version_ : str
        scikit-learn version the model was fitted with (a cached model of another version is
        retrained, not loaded).
    n_features_in_ : int
        Number of columns seen in ``fit``.
    """

    def __init__(
        self,
        n_estimators: int = 100,
        max_depth: int | None = 16,
        min_samples_leaf: int = 5,
        max_features: float | int | str | None = 0.33,
        residual_clip: float = 1.0,
        random_state: int | None = None,
        unseen_policy: str = "fallback",
        n_jobs: int | None = None,
        estimate: str = "median",
        unseen_residual_clip: float | None = None,
        unseen_reference: str = "history",
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.residual_clip = residual_clip
        self.random_state = random_state
        self.unseen_policy = unseen_policy
        self.n_jobs = n_jobs
        self.estimate = estimate
        self.unseen_residual_clip = unseen_residual_clip
        self.unseen_reference = unseen_reference

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> IterationPredictor:
        """Fit on feature rows ``X`` and iterations ``y`` (>= 0). Returns ``self``."""
        if self.unseen_policy not in UNSEEN_POLICIES:
            raise ValueError(
                f"unseen_policy must be one of {UNSEEN_POLICIES}, got {self.unseen_policy!r}"
            )
        if self.estimate not in ESTIMATES:
            raise ValueError(f"estimate must be one of {ESTIMATES}, got {self.estimate!r}")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        self._check_width(X)
        if np.any(y < 0):
            raise ValueError("iterations must be >= 0")
        if not self.residual_clip > 0:
            raise ValueError(f"residual_clip must be > 0, got {self.residual_clip!r}")
        if self.unseen_reference not in UNSEEN_REFERENCES:
            raise ValueError(f"unseen_reference must be 'history' or 'time_limit', got {self.unseen_reference!r}")
        self.global_median_ = float(np.median(y))
        limited = X[:, COLUMN["log_time_limit"]] != MISSING
        self.limit_log_ratio_ = (
            float(np.median(np.log1p(y[limited]) - X[limited, COLUMN["log_time_limit"]])) if limited.any() else 0.0
        )
        clip = np.full(X.shape[0], float(self.residual_clip))
        if self.unseen_residual_clip is not None:
            if not self.unseen_residual_clip > 0:
                raise ValueError(f"unseen_residual_clip must be > 0, got {self.unseen_residual_clip!r}")
            clip[X[:, COLUMN["group_count"]] <= 0] = float(self.unseen_residual_clip)
        residual = np.clip(np.log1p(y) - self._reference_log(X), -clip, clip)
        self.forest_ = RandomForestRegressor(
            n_estimators=self.n_estimators,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            max_features=self.max_features,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
            oob_score=self.estimate == "lognormal" and X.shape[0] >= 2,
        ).fit(X, residual, sample_weight=sample_weight)
        self.residual_var_ = self._residual_variance(X, residual)
        self.sklearn_version_ = sklearn.__version__
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted iterations, >= 0, one per row of ``X``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.predict_unchecked(X)

    def predict_unchecked(self, X: np.ndarray) -> np.ndarray:
        """:meth:`predict` without scikit-learn's input validation, for a fitted model and a
        float64 matrix straight from :func:`~asrpt.predict.features.build_features`.

        The simulator predicts one job at a time. For one row of 50 trees, validation costs
        about as much as walking the trees (0.25 ms), and the forest's joblib dispatch over
        its trees, which :meth:`_forest_mean` avoids, some 20 times as much.
        """
        unseen = X[:, COLUMN["group_count"]] <= 0
        hinted = unseen & (X[:, COLUMN["log_hint_adjusted"]] != MISSING)
        if not hinted.any():
            return self._without_hint(X, unseen)
        # A hinted row is first predicted as if it had no hint, then moved towards the hint as
        # far as its user's track record earns (trusted_hint_log).
        plain = X.copy()
        plain[np.ix_(hinted, _HINT_COLUMNS)] = MISSING
        predicted = self._without_hint(plain, unseen)
        predicted[hinted] = np.expm1(trusted_hint_log(
            np.log1p(predicted[hinted]), X[hinted, COLUMN["log_hint_adjusted"]], X[hinted, COLUMN["user_hint_count"]],
        ))
        return predicted

    def _without_hint(self, X: np.ndarray, unseen: np.ndarray) -> np.ndarray:
        """Each row's prediction by the unseen policy (rows with history: the forest)."""
        reference = self._reference_log(X)
        # The forest only for rows whose prediction is its correction (on the PAI trace, under
        # the paper's "zero", a third of the jobs): trees predict each row on its own.
        modelled = ~unseen if self.unseen_policy != "model" else np.ones(X.shape[0], dtype=bool)
        rest = unseen & ~modelled
        predicted = np.empty(X.shape[0], dtype=np.float64)
        if modelled.all():
            predicted[:] = self._modelled(X, reference)
        elif modelled.any():
            predicted[modelled] = self._modelled(X[modelled], reference[modelled])
        if self.unseen_policy == "zero":
            predicted[rest] = 0.0
        elif self.unseen_policy == "fallback":
            predicted[rest] = np.expm1(reference[rest])
        return predicted

    def _modelled(self, X: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Iterations of rows predicted by the forest's correction to ``reference`` (log1p)."""
        estimate = getattr(self, "estimate", "median")  # models pickled before the parameter
        if estimate == "median":
            return np.clip(np.expm1(reference + self._forest_mean(X)), 0.0, None)
        per_tree = reference[:, np.newaxis] + self._per_tree(X)  # log1p iterations, rows x trees
        if estimate == "mean":
            return np.clip(np.expm1(per_tree).mean(axis=1), 0.0, None)
        seen_var, unseen_var = getattr(self, "residual_var_", (0.0, 0.0))
        error_var = np.where(X[:, COLUMN["group_count"]] <= 0, unseen_var, seen_var)
        mu, variance = per_tree.mean(axis=1), per_tree.var(axis=1) + error_var
        return np.clip(np.expm1(mu + variance / 2.0), 0.0, None)

    def _residual_variance(self, X: np.ndarray, residual: np.ndarray) -> tuple[float, float]:
        """Out-of-bag variance of the forest's error in log space, (seen rows, unseen rows).

        The trees' disagreement is only the model's own uncertainty; a run's length scatters
        around even a perfect conditional median (on Philly by about a factor e), and the
        expected run length carries that scatter too. 0 unless ``estimate="lognormal"``.
        """
        oob = getattr(self.forest_, "oob_prediction_", None)
        if oob is None:
            return (0.0, 0.0)
        oob = np.asarray(oob).reshape(-1)
        ok = np.isfinite(oob)
        unseen = X[:, COLUMN["group_count"]] <= 0
        out = []
        for rows in (~unseen & ok, unseen & ok):
            out.append(float(np.var(residual[rows] - oob[rows])) if rows.sum() >= 2 else 0.0)
        return (out[0], out[1])

    def _per_tree(self, X: np.ndarray) -> np.ndarray:
        """Each tree's predicted residual, rows x trees."""
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        return np.column_stack([tree.tree_.predict(X32)[:, 0] for tree in self.forest_.estimators_])

    def _forest_mean(self, X: np.ndarray) -> np.ndarray:
        """The forest's prediction; for a few rows, its trees walked here instead of via joblib.

        Same arithmetic as ``RandomForestRegressor.predict`` (float32 input, per-tree values
        summed in estimator order, then divided), so the result is identical.
        """
        if X.shape[0] > _DIRECT_ROWS:
            return self.forest_.predict(X)
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        total = np.zeros(X.shape[0], dtype=np.float64)
        for tree in self.forest_.estimators_:
            total += tree.tree_.predict(X32)[:, 0]
        total /= len(self.forest_.estimators_)
        return total

    def unseen_mask(self, X: np.ndarray) -> np.ndarray:
        """Which rows have no finished group history (the first-seen jobs)."""
        X = np.asarray(X, dtype=np.float64)
        return X[:, COLUMN["group_count"]] <= 0

    def _reference_log(self, X: np.ndarray) -> np.ndarray:
        """log1p of the median of the most specific history each row has (the fallback chain)."""
        out = np.full(X.shape[0], math.log1p(self.global_median_), dtype=np.float64)
        for key in REFERENCE_CHAIN:  # later keys are more specific and override earlier ones
            has = X[:, COLUMN[f"{key}_count"]] > 0
            out[has] = X[has, COLUMN[f"{key}_median"]]
        if getattr(self, "unseen_reference", "history") == "time_limit":  # older pickles: history
            limited = (X[:, COLUMN["log_time_limit"]] != MISSING) & (X[:, COLUMN["group_count"]] <= 0)
            out[limited] = X[limited, COLUMN["log_time_limit"]] + self.limit_log_ratio_
        return out

    def _check_width(self, X: np.ndarray) -> None:
        if X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(
                f"X has {X.shape[1]} columns; IterationPredictor expects the "
                f"{len(FEATURE_NAMES)} columns of asrpt.predict.features.build_features"
            )

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags


#: Finished hinted jobs after which a user's hint counts half-way (in log space) from the
#: prediction without it towards the hint; see :func:`trusted_hint_log`.
HINT_TRUST_JOBS = 3.0

#: Feature columns that carry the job's own hint (blanked to predict a row as if unhinted).
_HINT_COLUMNS = [COLUMN["log_hint"], COLUMN["log_hint_adjusted"]]


def trusted_hint_log(without_log: np.ndarray, hint_log: np.ndarray, hint_count: np.ndarray) -> np.ndarray:
    """log1p prediction of an unseen job with a hint: ``hint_log`` (the hint corrected by its
    user's median actual/hint ratio) counts only as far as the user's track record earns it.

    A hint above the prediction without it (``without_log``) is taken as it is: claiming a
    longer run gains a job nothing. A hint below it moves the prediction towards the hint by
    the weight ``n / (n + HINT_TRUST_JOBS)`` of the user's ``n`` finished hinted jobs: no
    record, no credit, so ``#ASRPT iterations=1`` on a new script does not put it ahead of
    a known short job; a record of accurate hints earns most of its hint. Pure, vectorised.
    """
    weight = hint_count / (hint_count + HINT_TRUST_JOBS)
    lowered = without_log + weight * (hint_log - without_log)
    return np.where(hint_log >= without_log, hint_log, lowered)


def raise_underestimate(
    predicted: float, attained: float, *, factor: float = 2.0, floor: float = 1.0
) -> float:
    """The prediction to use for a job that has already run ``attained`` iterations.

    While the job is within its prediction, the prediction stands. Once it has run that far,
    the prediction is multiplied by ``factor`` (doubling by default) until it exceeds what
    the job has attained, so an underestimated job stops jumping the queue while a job that
    was predicted well is never penalised. A prediction of 0 (an unseen job under the paper's
    policy) starts the doubling from ``floor``.

    Pure; the caller records the raised prediction (``record_prediction``).
    """
    if factor <= 1.0:
        raise ValueError(f"factor must be > 1, got {factor!r}")
    if floor <= 0.0:
        raise ValueError(f"floor must be > 0, got {floor!r}")
    if not (math.isfinite(predicted) and math.isfinite(attained)):
        raise ValueError(f"predicted and attained must be finite, got {predicted!r}, {attained!r}")
    if attained < predicted:
        return predicted
    current = max(predicted, floor)
    if current > attained:
        return current
    # Smallest k with current * factor**k > attained, computed directly and then nudged to
    # absorb floating-point rounding at the boundary.
    steps = max(1, math.ceil(math.log(attained / current) / math.log(factor)))
    raised = current * factor**steps
    while raised <= attained:
        raised *= factor
    while steps > 1 and raised / factor > attained:
        raised /= factor
        steps -= 1
    return raised
