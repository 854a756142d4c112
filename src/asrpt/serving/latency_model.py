"""Linear prefill and decode time models, and their non-negative least-squares fit.

Prefill of a batch of B requests with prompt lengths l_i (N = sum l_i, Q = sum l_i^2):
``T_pre = c0 + c1*B + c2*N + c3*Q`` (per-request overhead, linear GEMM work, quadratic
attention). Decode step over B requests holding K cached tokens: ``T_dec = d0 + d1*B +
d2*K``. Every term is a cost that adds time, so all coefficients are constrained >= 0:
unconstrained fits of real profiles do produce negative attention terms (DistServe's own
OPT-66B TP2 prefill fit has one), which would make long prompts look cheaper.

Weights are 1/y, so the fit minimises squared *relative* error, the quantity reported
(median absolute percentage error on held-out rows). Columns the data cannot identify
(constant or collinear with earlier ones) get coefficient 0 and are listed, rather than
taking arbitrary values. Rows that no non-negative model can explain (more work in every
term, less than half the time of another row) are dropped as failed measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy.optimize import nnls

PREFILL_TERMS: tuple[str, ...] = ("intercept_ms", "per_request_ms", "per_prompt_token_ms", "per_squared_prompt_token_ms")
DECODE_TERMS: tuple[str, ...] = ("intercept_ms", "per_request_ms", "per_cached_token_ms",
                                 "per_interleaved_prefill_ms", "per_interleaved_prefill_token_ms")


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """Time of one prefill iteration, in ms."""

    intercept_ms: float = 0.0
    per_request_ms: float = 0.0
    per_prompt_token_ms: float = 0.0
    per_squared_prompt_token_ms: float = 0.0

    def time_ms(self, batch_size: float, prompt_tokens: float, squared_prompt_tokens: float) -> float:
        return (self.intercept_ms + self.per_request_ms * batch_size + self.per_prompt_token_ms * prompt_tokens
                + self.per_squared_prompt_token_ms * squared_prompt_tokens)

    @classmethod
    def from_coefficients(cls, coefficients: Mapping[str, float]) -> "PrefillModel":
        return cls(**{name: float(coefficients.get(name, 0.0)) for name in PREFILL_TERMS})


@dataclass(frozen=True, slots=True)
class DecodeModel:
    """Time of one decode iteration, in ms (stall terms of timeline fits are not part of
    it: a simulator runs those prefills itself)."""

    intercept_ms: float = 0.0
    per_request_ms: float = 0.0
    per_cached_token_ms: float = 0.0

    def time_ms(self, batch_size: float, cached_tokens: float) -> float:
        return self.intercept_ms + self.per_request_ms * batch_size + self.per_cached_token_ms * cached_tokens

    def steps_time_ms(self, batch_size: float, cached_tokens: float, steps: int) -> float:
        """Total time of ``steps`` consecutive steps of an unchanged batch, whose cache
        grows by ``batch_size`` tokens per step (closed form, since the model is linear)."""
        return steps * self.time_ms(batch_size, cached_tokens) + self.per_cached_token_ms * batch_size * steps * (steps - 1) / 2

    @classmethod
    def from_coefficients(cls, coefficients: Mapping[str, float]) -> "DecodeModel":
        return cls(**{name: float(coefficients.get(name, 0.0)) for name in ("intercept_ms", "per_request_ms", "per_cached_token_ms")})


@dataclass(frozen=True, slots=True)
class InstanceLatency:
    """The fitted time model of one serving instance (a model on t accelerators)."""

    prefill: PrefillModel
    decode: DecodeModel


# --------------------------------------------------------------------------- features

FeatureSpec = Mapping[str, Callable[[object], float]]

PREFILL_FEATURES: FeatureSpec = {
    "intercept_ms": lambda s: 1.0,
    "per_request_ms": lambda s: s.batch_size,
    "per_prompt_token_ms": lambda s: s.prompt_tokens,
    "per_squared_prompt_token_ms": lambda s: s.squared_prompt_tokens,
}
DECODE_FEATURES: FeatureSpec = {
    "intercept_ms": lambda s: 1.0,
    "per_request_ms": lambda s: s.batch_size,
    "per_cached_token_ms": lambda s: s.cached_tokens,
    "per_interleaved_prefill_ms": lambda s: s.interleaved_prefills,
    "per_interleaved_prefill_token_ms": lambda s: s.interleaved_prefill_tokens,
}

# Pooled over TP degrees of one (model, accelerator): compute shrinks as 1/t, the
# all-reduce of activations moves (t-1)/t of them, weights read per step shrink as 1/t.
POOLED_PREFILL_FEATURES: FeatureSpec = {
    "intercept_ms": lambda s: 1.0,
    "per_request_ms": lambda s: s.batch_size,
    "per_prompt_token_gpu_ms": lambda s: s.prompt_tokens / s.key.tp,
    "per_squared_prompt_token_gpu_ms": lambda s: s.squared_prompt_tokens / s.key.tp,
    "per_prompt_token_allreduce_ms": lambda s: s.prompt_tokens * (s.key.tp - 1) / s.key.tp,
}
POOLED_DECODE_FEATURES: FeatureSpec = {
    "intercept_ms": lambda s: 1.0,
    "weights_gpu_ms": lambda s: 1.0 / s.key.tp,
    "per_request_gpu_ms": lambda s: s.batch_size / s.key.tp,
    "per_cached_token_gpu_ms": lambda s: s.cached_tokens / s.key.tp,
    "per_request_allreduce_ms": lambda s: s.batch_size * (s.key.tp - 1) / s.key.tp,
    "per_interleaved_prefill_ms": lambda s: s.interleaved_prefills,
    "per_interleaved_prefill_token_ms": lambda s: s.interleaved_prefill_tokens,
}


def design_matrix(samples: Sequence[object], spec: FeatureSpec) -> np.ndarray:
    return np.array([[feature(s) for feature in spec.values()] for s in samples], dtype=float).reshape(len(samples), len(spec))


def pooled_at_tp(prefill: Mapping[str, float], decode: Mapping[str, float], tp: int) -> InstanceLatency:
    """Collapse pooled coefficients to the per-degree model at ``tp``."""
    share = (tp - 1) / tp
    return InstanceLatency(
        prefill=PrefillModel(
            intercept_ms=prefill.get("intercept_ms", 0.0),
            per_request_ms=prefill.get("per_request_ms", 0.0),
            per_prompt_token_ms=prefill.get("per_prompt_token_gpu_ms", 0.0) / tp + prefill.get("per_prompt_token_allreduce_ms", 0.0) * share,
            per_squared_prompt_token_ms=prefill.get("per_squared_prompt_token_gpu_ms", 0.0) / tp,
        ),
        decode=DecodeModel(
            intercept_ms=decode.get("intercept_ms", 0.0) + decode.get("weights_gpu_ms", 0.0) / tp,
            per_request_ms=decode.get("per_request_gpu_ms", 0.0) / tp + decode.get("per_request_allreduce_ms", 0.0) * share,
            per_cached_token_ms=decode.get("per_cached_token_gpu_ms", 0.0) / tp,
        ),
    )


# --------------------------------------------------------------------------- fitting

@dataclass(frozen=True, slots=True, kw_only=True)
class LinearFit:
    coefficients: dict[str, float]
    #: Terms the data could not identify (coefficient fixed at 0).
    unidentified: tuple[str, ...]
    #: Indices (into the rows given) dropped as gross outliers.
    trimmed: tuple[int, ...]

    def predict(self, X: np.ndarray) -> np.ndarray:
        return X @ np.array(list(self.coefficients.values()))


def identifiable_columns(X: np.ndarray) -> list[int]:
    """Columns kept in order, skipping any that adds no rank to those before it."""
    scale = np.abs(X).max(axis=0)
    scaled = X / np.where(scale > 0, scale, 1.0)
    kept: list[int] = []
    rank = 0
    for column in range(X.shape[1]):
        if scale[column] == 0:
            continue
        trial = np.linalg.matrix_rank(scaled[:, kept + [column]], tol=1e-9 * math.sqrt(X.shape[0]))
        if trial > rank:
            kept.append(column)
            rank = trial
    return kept


def _nnls_weighted(X: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    A = X * weights[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(A / scale, y * weights, maxiter=50 * X.shape[1] + 100)
    return solution / scale


def implausible_rows(X: np.ndarray, y: np.ndarray, *, factor: float = 2.0) -> np.ndarray:
    """Rows to drop so that no pair contradicts every non-negative model.

    A pair contradicts when one row has at least as much of every feature (no less work of
    any kind) yet took less than 1/``factor`` of the other's time: with all coefficients
    >= 0 predicted time only grows with every feature. One of the two is a failed
    measurement, but which one is not known from the pair (splitwise's Llama-2-70B TP2
    batch-64 prefill reports a tenth of the batch-32 time; a DistServe TTFT can include a
    wait the timeline does not show). Rows are dropped greedily, the one in most
    contradicting pairs first, until none is left. Relative weights make these rows
    dangerous: a bad low reading pulls the fit towards itself.
    """
    n = len(y)
    tolerance = 1e-9 * np.maximum(np.abs(X).max(axis=0), 1.0)
    conflict = np.zeros((n, n), dtype=bool)
    for start in range(0, n, 256):
        block = slice(start, start + 256)
        no_less_work = np.all(X[None, :, :] <= X[block, None, :] + tolerance, axis=2)  # [i, j]: X_j <= X_i
        conflict[block] = no_less_work & (y[None, :] > factor * y[block, None])
    conflict |= conflict.T
    degree = conflict.sum(axis=1)
    dropped = np.zeros(n, dtype=bool)
    while degree.max(initial=0) > 0:
        worst = int(np.argmax(degree))
        dropped[worst] = True
        degree -= conflict[worst]
        degree[worst] = 0
        conflict[worst] = False
        conflict[:, worst] = False
    return dropped


def fit_nonnegative(X: np.ndarray, y: np.ndarray, terms: Sequence[str], *, relative: bool = True,
                    implausible_factor: float = 2.0) -> LinearFit:
    """Non-negative least squares of ``y ~ X`` (1/y weights unless ``relative`` is
    False), after dropping :func:`implausible_rows`."""
    if X.shape[0] == 0 or np.any(y <= 0):
        raise ValueError("need at least one row and positive times")
    columns = identifiable_columns(X)
    keep = ~implausible_rows(X[:, columns], y, factor=implausible_factor)
    weights = 1.0 / y if relative else np.ones_like(y)
    solution = _nnls_weighted(X[keep][:, columns], y[keep], weights[keep])
    coefficients = dict.fromkeys(terms, 0.0)
    for column, value in zip(columns, solution):
        coefficients[terms[column]] = float(value)
    return LinearFit(
        coefficients=coefficients,
        unidentified=tuple(terms[c] for c in range(len(terms)) if c not in columns),
        trimmed=tuple(int(i) for i in np.flatnonzero(~keep)),
    )


def median_ape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Median absolute percentage error, as a fraction (0.05 = 5 %)."""
    return float(np.median(np.abs(predicted - measured) / measured))


def assign_folds(groups: Sequence[str], *, folds: int, seed: int) -> np.ndarray:
    """Fold number (0..folds-1) of every row: groups are shuffled with ``seed`` and dealt
    round-robin, so repetitions of one measured point stay in one fold and every fold
    holds about 1/folds of the points."""
    unique = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(unique))
    fold_of = {unique[index]: position % folds for position, index in enumerate(order)}
    return np.array([fold_of[g] for g in groups], dtype=int)
