"""Names and defaults of the iteration predictor's rules, without its heavy imports (the
daemon's configuration and the CLI validate against them; scikit-learn loads only to predict).

The defaults were chosen on the reduced scenario matrix (bench/README.md, "Predictions A-SRPT
really has"); the paper's rule, ``unseen_policy="zero"`` with ``estimate="median"``, stays
available by name so its claims remain testable.
"""

from __future__ import annotations

#: What the forest predicts for a job whose group has no finished run (``predict.predictor``).
UNSEEN_POLICIES: tuple[str, ...] = ("zero", "fallback", "model")
#: Reference of a job without group history (``predict.predictor``).
UNSEEN_REFERENCES: tuple[str, ...] = ("history", "time_limit")
#: Which point of the trees' distribution a prediction is (``predict.predictor``).
ESTIMATES: tuple[str, ...] = ("median", "mean", "lognormal")

DEFAULT_RF_UNSEEN_POLICY = "model"
DEFAULT_RF_ESTIMATE = "median"
DEFAULT_RF_UNSEEN_REFERENCE = "time_limit"
