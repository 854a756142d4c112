"""Iteration prediction: causal features from the job history and a random-forest estimator."""

from asrpt.predict.features import FEATURE_NAMES, JobLike, JobRecord, build_features
from asrpt.predict.predictor import IterationPredictor, raise_underestimate

__all__ = [
    "FEATURE_NAMES",
    "IterationPredictor",
    "JobLike",
    "JobRecord",
    "build_features",
    "raise_underestimate",
]
