"""Offline evaluation of the iteration predictor on a real trace.

Protocol: sort jobs by submit time; the first ``train_fraction`` of them are the training
period, the rest the test period. The model is fitted once, at the split, on training jobs
whose outcome is known by then (a job still running at the split has no label yet), and
predicts every test job from its submission features; history aggregates of test jobs keep
accumulating causally through the test period, as they would in the daemon between two
retrains. Errors are reported overall and split into *recurring* jobs (their group has
finished runs before the submission) and *first-seen* jobs.

The PAI 2020 trace has no iteration counts; its run time in seconds is the target instead
(equivalent up to the per-iteration time, which the trace does not give).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np

from asrpt.exceptions import TraceFormatError
from asrpt.predict.features import COLUMN, JobRecord, build_features
from asrpt.predict.predictor import IterationPredictor

#: Columns read from the PAI trace (others are ignored).
PAI_COLUMNS: tuple[str, ...] = (
    "job_id",
    "user",
    "num_gpu",
    "num_pod",
    "duration",
    "job_name",
    "submit_time",
    "group",
    "gpu_type",
    "wait_time",
)

#: Simple history baselines the forest is compared with.
BASELINES: tuple[str, ...] = (
    "global-median",
    "group-mean",
    "group-last",
    "user-mean",
    "group-accel-median",
)


def read_pai_trace(path: str | Path) -> list[JobRecord]:
    """Read the Alibaba PAI 2020 job-duration sample (``pai_job_duration_estimate_*.csv``).

    The trace's own ``user_dur`` / ``group_dur`` estimates are ignored: they are not causal.
    The end time is submit + wait + duration; ``num_pod`` is taken as data-parallel replicas.

    Raises
    ------
    TraceFormatError
        A required column is missing or a value does not parse; the message names the file,
        the line and the raw value.
    """
    path = Path(path)
    records: list[JobRecord] = []
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise TraceFormatError(f"{path}: cannot read trace ({error.strerror or error})") from error
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in PAI_COLUMNS if c not in header]
        if missing:
            raise TraceFormatError(
                f"{path}: not a PAI job-duration trace; missing columns {missing} "
                f"(header: {','.join(header) or '<empty>'})"
            )
        for line, raw in enumerate(reader, start=2):
            try:
                submit = float(raw["submit_time"])
                wait = float(raw["wait_time"] or 0.0)
                duration = float(raw["duration"])
                gpus = float(raw["num_gpu"] or 0.0)
                pods = float(raw["num_pod"] or 1.0)
            except (TypeError, ValueError) as error:
                raise TraceFormatError(f"{path}:{line}: bad number in {raw!r} ({error})") from error
            if not all(math.isfinite(v) for v in (submit, wait, duration, gpus, pods)) or duration < 0:
                raise TraceFormatError(f"{path}:{line}: value out of range in {raw!r}")
            gpu_type = raw["gpu_type"] or None
            records.append(
                JobRecord(
                    job_id=raw["job_id"],
                    user=raw["user"],
                    submit_time_s=submit,
                    job_name=raw["job_name"] or None,
                    group=raw["group"] or None,
                    accelerators=gpus,
                    accelerator_type=gpu_type,
                    parallel_data=max(1, round(pods)),
                    end_time_s=submit + max(0.0, wait) + duration,
                    iterations=duration,
                )
            )
    if not records:
        raise TraceFormatError(f"{path}: trace has no jobs")
    return records


def error_metrics(predicted: np.ndarray, actual: np.ndarray) -> dict[str, float | int | None]:
    """Median absolute percentage error (jobs with actual > 0) and mean |log1p error|."""
    predicted = np.asarray(predicted, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    positive = actual > 0
    ape = np.abs(predicted[positive] - actual[positive]) / actual[positive]
    return {
        "n": int(actual.size),
        "median_ape": float(np.median(ape)) if ape.size else None,
        "mae_log": float(np.mean(np.abs(np.log1p(predicted) - np.log1p(actual))))
        if actual.size
        else None,
    }


def baseline_predictions(name: str, X: np.ndarray, global_median: float) -> np.ndarray:
    """Predictions of a history baseline from the feature matrix (means are in log space)."""
    out = np.full(X.shape[0], global_median, dtype=np.float64)
    if name == "global-median":
        return out
    key, stat = {
        "group-mean": ("group", "mean"),
        "group-last": ("group", "last"),
        "user-mean": ("user", "mean"),
        "group-accel-median": ("group_accel", "median"),
    }[name]
    has = X[:, COLUMN[f"{key}_count"]] > 0
    out[has] = np.expm1(X[has, COLUMN[f"{key}_{stat}"]])
    return out


def evaluate(
    rows: Sequence[JobRecord],
    *,
    train_fraction: float = 0.8,
    predictor: IterationPredictor | None = None,
    retrain_every: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Fit at the split, predict the test period, and report errors per model.

    With ``retrain_every=N`` the test period is replayed in submit order in chunks of N jobs,
    and before each chunk the model (and the global median) is refitted on every job that
    finished before the chunk's first submission: what a daemon retraining on a schedule sees.

    Returns ``{"n_train", "n_test", "train_fraction", "split_time_s", "models": {NAME:
    {"n", "median_ape", "mae_log", "recurring": {...}, "first_seen": {...}}}}`` with
    NAME in ``("rf", *BASELINES)``. ``progress(done, total)`` is called after each chunk of test jobs.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction!r}")
    ordered = sorted(rows, key=lambda r: (r.submit_time_s, r.job_id))
    labelled = [r for r in ordered if r.iterations is not None and r.end_time_s is not None]
    cut = int(len(ordered) * train_fraction)
    if cut < 1 or cut >= len(ordered):
        raise ValueError(f"{len(ordered)} jobs are too few to split at {train_fraction}")
    split_time_s = ordered[cut].submit_time_s

    X = build_features(ordered)
    y = np.array(
        [np.nan if r.iterations is None else float(r.iterations) for r in ordered], dtype=np.float64
    )
    index = np.arange(len(ordered))
    ends = np.array([np.inf if r.end_time_s is None else r.end_time_s for r in ordered])
    train = (index < cut) & (ends < split_time_s) & np.isfinite(y)
    test = (index >= cut) & np.isfinite(y)
    if not train.any() or not test.any():
        raise ValueError("no labelled jobs on one side of the split")

    model = predictor if predictor is not None else IterationPredictor(random_state=0)
    X_test, y_test = X[test], y[test]
    recurring = X_test[:, COLUMN["group_count"]] > 0
    test_index = index[test]
    chunk = retrain_every if retrain_every else len(test_index)
    predictions: dict[str, list[np.ndarray]] = {"rf": [], **{name: [] for name in BASELINES}}
    fits = 0
    for start in range(0, len(test_index), chunk):
        rows_now = test_index[start : start + chunk]
        chunk_start_s = ordered[int(rows_now[0])].submit_time_s
        # Known at the chunk's start: jobs that ended before it (the split's set for chunk 0).
        known = train if start == 0 else (ends < chunk_start_s) & np.isfinite(y) & (index < rows_now[0])
        model.fit(X[known], y[known])
        fits += 1
        global_median = float(np.median(y[known]))
        predictions["rf"].append(model.predict(X[rows_now]))
        for name in BASELINES:
            predictions[name].append(baseline_predictions(name, X[rows_now], global_median))
        if progress is not None:
            progress(start + len(rows_now), len(test_index))
    candidates = {name: np.concatenate(parts) for name, parts in predictions.items()}

    models: dict[str, Any] = {}
    for name, predicted in candidates.items():
        entry: dict[str, Any] = dict(error_metrics(predicted, y_test))
        entry["recurring"] = error_metrics(predicted[recurring], y_test[recurring])
        entry["first_seen"] = error_metrics(predicted[~recurring], y_test[~recurring])
        models[name] = entry
    return {
        "n_jobs": len(ordered),
        "n_labelled": len(labelled),
        "n_train": int(train.sum()),
        "n_test": int(test.sum()),
        "n_test_recurring": int(recurring.sum()),
        "train_fraction": train_fraction,
        "split_time_s": split_time_s,
        "fits": fits,
        "models": models,
    }


def format_table(report: dict[str, Any]) -> str:
    """The error table as text, one model per line, best overall median APE first."""

    def pct(value: float | None) -> str:
        return "    -" if value is None else f"{100.0 * value:6.1f}%"

    def num(value: float | None) -> str:
        return "   -" if value is None else f"{value:5.2f}"

    lines = [
        f"jobs {report['n_jobs']}, trained on {report['n_train']} finished by the split, "
        f"tested on {report['n_test']} ({report['n_test_recurring']} recurring)",
        f"{'model':<20} {'median APE':>10} {'MAE log':>8}   "
        f"{'recurring':>10} {'MAE log':>8}   {'first-seen':>10} {'MAE log':>8}",
    ]
    ranked = sorted(
        report["models"].items(),
        key=lambda item: math.inf if item[1]["median_ape"] is None else item[1]["median_ape"],
    )
    for name, m in ranked:
        lines.append(
            f"{name:<20} {pct(m['median_ape']):>10} {num(m['mae_log']):>8}   "
            f"{pct(m['recurring']['median_ape']):>10} {num(m['recurring']['mae_log']):>8}   "
            f"{pct(m['first_seen']['median_ape']):>10} {num(m['first_seen']['mae_log']):>8}"
        )
    return "\n".join(lines)
