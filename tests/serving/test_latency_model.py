"""The least-squares fit: recovers known coefficients, stays non-negative, names what the
data cannot identify, and drops readings no non-negative model can explain."""

import numpy as np
import pytest

from asrpt.serving.latency_model import (
    DECODE_FEATURES,
    PREFILL_FEATURES,
    DecodeModel,
    assign_folds,
    design_matrix,
    fit_nonnegative,
    implausible_rows,
    median_ape,
    pooled_at_tp,
)
from asrpt.serving.profiles import DecodeSample, PrefillSample, ProfileKey

KEY = ProfileKey(model="m", hardware="h", tp=2)
TRUE_PREFILL = {"intercept_ms": 12.0, "per_request_ms": 25.0, "per_prompt_token_ms": 0.15, "per_squared_prompt_token_ms": 2e-5}
TRUE_DECODE = {"intercept_ms": 30.0, "per_request_ms": 0.4, "per_cached_token_ms": 6e-4}


def prefill_samples(noise: float, seed: int = 0) -> list[PrefillSample]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(120):
        lengths = rng.integers(16, 4096, size=rng.integers(1, 9))
        n, q = float(lengths.sum()), float((lengths.astype(float) ** 2).sum())
        y = (TRUE_PREFILL["intercept_ms"] + TRUE_PREFILL["per_request_ms"] * len(lengths)
             + TRUE_PREFILL["per_prompt_token_ms"] * n + TRUE_PREFILL["per_squared_prompt_token_ms"] * q)
        samples.append(PrefillSample(key=KEY, batch_size=len(lengths), prompt_tokens=n, squared_prompt_tokens=q,
                                     time_ms=y * (1 + noise * rng.standard_normal()), group=str(i), source=f"synthetic:{i}"))
    return samples


def decode_samples(noise: float, seed: int = 0) -> list[DecodeSample]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(120):
        batch = int(rng.integers(1, 128))
        cached = float(batch * rng.integers(64, 4000))
        y = TRUE_DECODE["intercept_ms"] + TRUE_DECODE["per_request_ms"] * batch + TRUE_DECODE["per_cached_token_ms"] * cached
        samples.append(DecodeSample(key=KEY, batch_size=batch, cached_tokens=cached,
                                    time_ms=y * (1 + noise * rng.standard_normal()), group=str(i), source=f"synthetic:{i}"))
    return samples


@pytest.mark.parametrize("noise, tolerance", [(0.0, 1e-6), (0.01, 0.1)])
def test_fit_recovers_known_prefill_coefficients(noise, tolerance):
    samples = prefill_samples(noise)
    fit = fit_nonnegative(design_matrix(samples, PREFILL_FEATURES), np.array([s.time_ms for s in samples]),
                          tuple(PREFILL_FEATURES))
    for name, value in TRUE_PREFILL.items():
        assert fit.coefficients[name] == pytest.approx(value, rel=tolerance), name
    assert fit.unidentified == ()


@pytest.mark.parametrize("noise, tolerance", [(0.0, 1e-6), (0.01, 0.1)])
def test_fit_recovers_known_decode_coefficients(noise, tolerance):
    samples = decode_samples(noise)
    fit = fit_nonnegative(design_matrix(samples, DECODE_FEATURES), np.array([s.time_ms for s in samples]),
                          tuple(DECODE_FEATURES))
    for name, value in TRUE_DECODE.items():
        assert fit.coefficients[name] == pytest.approx(value, rel=tolerance), name
    # No timeline stalls in these samples: those two terms cannot be identified.
    assert set(fit.unidentified) == {"per_interleaved_prefill_ms", "per_interleaved_prefill_token_ms"}


def test_coefficients_stay_non_negative_where_plain_least_squares_goes_negative():
    # Time falls slightly with x2 in the data; unconstrained LS would give x2 a negative weight.
    X = np.array([[1.0, 1.0, 0.0], [1.0, 2.0, 1.0], [1.0, 3.0, 3.0], [1.0, 4.0, 6.0], [1.0, 5.0, 9.0]])
    y = np.array([10.0, 11.0, 11.5, 12.0, 12.2])
    plain = np.linalg.lstsq(X, y, rcond=None)[0]
    assert plain.min() < 0
    fit = fit_nonnegative(X, y, ("a", "b", "c"))
    assert min(fit.coefficients.values()) >= 0.0


def test_constant_column_is_reported_unidentified_not_guessed():
    X = np.array([[1.0, 1.0, float(n)] for n in range(1, 30)])  # batch always 1: collinear with the intercept
    y = 5.0 + 0.5 * X[:, 2]
    fit = fit_nonnegative(X, y, ("intercept_ms", "per_request_ms", "per_prompt_token_ms"))
    assert fit.unidentified == ("per_request_ms",)
    assert fit.coefficients["per_request_ms"] == 0.0
    assert fit.coefficients["intercept_ms"] == pytest.approx(5.0)


def test_failed_low_reading_is_dropped_and_does_not_drag_the_fit():
    samples = prefill_samples(0.0)
    X = design_matrix(samples, PREFILL_FEATURES)
    y = np.array([s.time_ms for s in samples])
    worst = int(np.argmax(X[:, 2]))  # most prompt tokens, reported at a tenth of the truth
    y[worst] /= 10.0
    assert implausible_rows(X, y).tolist().count(True) == 1
    fit = fit_nonnegative(X, y, tuple(PREFILL_FEATURES))
    assert fit.trimmed == (worst,)
    assert fit.coefficients["per_prompt_token_ms"] == pytest.approx(TRUE_PREFILL["per_prompt_token_ms"], rel=1e-6)


def test_folds_keep_repetitions_together_and_are_seeded():
    groups = [f"g{i // 3}" for i in range(60)]  # 20 points, 3 repetitions each
    folds = assign_folds(groups, folds=4, seed=7)
    for g in set(groups):
        assert len({f for f, h in zip(folds, groups) if h == g}) == 1
    assert sorted(np.bincount(folds).tolist()) == [15, 15, 15, 15]
    assert (assign_folds(groups, folds=4, seed=7) == folds).all()
    assert not (assign_folds(groups, folds=4, seed=8) == folds).all()


def test_steps_time_is_the_sum_of_single_steps():
    model = DecodeModel(intercept_ms=30.0, per_request_ms=0.5, per_cached_token_ms=1e-3)
    by_step = sum(model.time_ms(8, 1000 + 8 * i) for i in range(50))
    assert model.steps_time_ms(8, 1000, 50) == pytest.approx(by_step)


def test_pooled_model_scales_compute_with_tp():
    prefill = {"intercept_ms": 5.0, "per_request_ms": 1.0, "per_prompt_token_gpu_ms": 0.4,
               "per_squared_prompt_token_gpu_ms": 8e-5, "per_prompt_token_allreduce_ms": 0.01}
    decode = {"intercept_ms": 10.0, "weights_gpu_ms": 80.0, "per_request_gpu_ms": 0.8, "per_cached_token_gpu_ms": 4e-4,
              "per_request_allreduce_ms": 0.02}
    one, four = pooled_at_tp(prefill, decode, 1), pooled_at_tp(prefill, decode, 4)
    assert one.prefill.per_prompt_token_ms == pytest.approx(0.4)
    assert four.prefill.per_prompt_token_ms == pytest.approx(0.1 + 0.01 * 0.75)
    assert four.decode.intercept_ms == pytest.approx(10.0 + 20.0)
    assert four.decode.per_cached_token_ms == pytest.approx(1e-4)


def test_median_ape_is_a_fraction():
    assert median_ape(np.array([110.0, 90.0, 100.0]), np.array([100.0, 100.0, 100.0])) == pytest.approx(0.1)
