"""Fit every (model, accelerator, TP) found in some profiles and report held-out error.

This is what ``asrpt serving fit`` writes. For each key and phase the measured points
(groups of repetitions) are dealt into ``folds`` seeded folds; each fold is held out once
while the others are fitted, and the median absolute percentage error over all held-out
predictions is reported. A single split would hold out three of the thirteen prefill
points of a splitwise key, and the figure would swing by 5x with the seed; with folds
every point is held out exactly once. The published coefficients are then refitted on all
rows. The same held-out errors are also gathered per input file. A pooled fit per (model, accelerator) over all its TP degrees, with TP as a
feature, serves TP degrees that were not profiled.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from asrpt.serving.errors import NotEnoughData
from asrpt.serving.latency_model import (
    DECODE_FEATURES,
    POOLED_DECODE_FEATURES,
    POOLED_PREFILL_FEATURES,
    PREFILL_FEATURES,
    FeatureSpec,
    design_matrix,
    fit_nonnegative,
    assign_folds,
    median_ape,
)
from asrpt.serving.profiles import Profile

#: Fewer distinct measured points than this: fit on everything, report no held-out error.
MIN_GROUPS_FOR_HOLDOUT = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class FitSettings:
    #: Each fold is held out once (4 folds = a quarter held out at a time).
    folds: int = 4
    seed: int = 0

    def as_dict(self) -> dict:
        return {"heldout": f"{self.folds}-fold grouped cross-validation", "folds": self.folds, "seed": self.seed,
                "weights": "1/y (relative error)",
                "non_negative": True, "units": "ms", "metric": "median absolute percentage error, fraction"}


def _fit_phase(samples: Sequence[object], spec: FeatureSpec, settings: FitSettings,
               split_seed: int) -> tuple[dict, list[tuple[object, float]]]:
    terms = tuple(spec)
    X = design_matrix(samples, spec)
    y = np.array([s.time_ms for s in samples])  # type: ignore[attr-defined]
    groups = [s.group for s in samples]  # type: ignore[attr-defined]
    if len(samples) < len(terms):
        raise NotEnoughData(f"{len(samples)} rows for {len(terms)} terms ({samples[0].key.label})")  # type: ignore[attr-defined]
    heldout_errors: list[tuple[object, float]] = []
    heldout_ape: float | None = None
    if settings.folds >= 2 and len(set(groups)) >= max(MIN_GROUPS_FOR_HOLDOUT, settings.folds):
        fold = assign_folds(groups, folds=settings.folds, seed=split_seed)
        predicted = np.empty(len(samples))
        for k in range(settings.folds):
            train = fold != k
            train_fit = fit_nonnegative(X[train], y[train], terms)
            predicted[~train] = train_fit.predict(X[~train])
        heldout_ape = median_ape(predicted, y)
        heldout_errors = [(sample, float(abs(p - m) / m)) for sample, p, m in zip(samples, predicted, y)]
    full = fit_nonnegative(X, y, terms)
    report = {
        "coefficients": full.coefficients,
        "heldout_median_ape": heldout_ape,
        "rows": len(samples),
        "points": len(set(groups)),
        "unidentified": list(full.unidentified),
        "trimmed": [samples[i].source for i in full.trimmed],  # type: ignore[attr-defined]
    }
    return report, heldout_errors


def fit_profiles(profiles: Sequence[Profile], settings: FitSettings = FitSettings()) -> dict:
    """The ``serving fit`` document: ``{"fits": {label: {"prefill": ..., "decode": ...}},
    "pooled": ..., "files": ..., "settings": ...}``."""
    origin: dict[int, str] = {}
    by_key: dict = defaultdict(lambda: ([], []))
    for profile in profiles:
        for sample in profile.prefill:
            by_key[sample.key][0].append(sample)
            origin[id(sample)] = profile.path
        for sample in profile.decode:
            by_key[sample.key][1].append(sample)
            origin[id(sample)] = profile.path
    if not by_key:
        raise NotEnoughData("no usable rows in the profiles")
    file_errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"prefill": [], "decode": []})
    fits: dict[str, dict] = {}
    for number, key in enumerate(sorted(by_key)):
        prefill, decode = by_key[key]
        entry: dict = {}
        for phase, samples, spec in (("prefill", prefill, PREFILL_FEATURES), ("decode", decode, DECODE_FEATURES)):
            if not samples:
                continue
            report, errors = _fit_phase(samples, spec, settings, settings.seed + number)
            entry[phase] = report
            for sample, error in errors:
                file_errors[origin[id(sample)]][phase].append(error)
        entry["files"] = sorted({origin[id(s)] for s in prefill + decode})
        fits[key.label] = entry
    pooled = _fit_pooled(by_key, settings)
    files = {}
    for profile in profiles:
        errors = file_errors.get(profile.path, {"prefill": [], "decode": []})
        files[profile.path] = {
            "format": profile.format,
            "keys": [k.label for k in profile.keys()],
            "prefill_rows": len(profile.prefill),
            "decode_rows": len(profile.decode),
            "prefill_heldout_median_ape": float(np.median(errors["prefill"])) if errors["prefill"] else None,
            "decode_heldout_median_ape": float(np.median(errors["decode"])) if errors["decode"] else None,
            "skipped": dict(profile.skipped),
        }
    return {"fits": fits, "pooled": pooled, "files": files, "settings": settings.as_dict()}


def _fit_pooled(by_key: dict, settings: FitSettings) -> dict:
    """One fit per (model, accelerator) across its TP degrees; held-out error by degree."""
    families: dict[tuple[str, str], list] = defaultdict(list)
    for key in by_key:
        families[(key.model, key.hardware)].append(key)
    pooled = {}
    for (model, hardware), keys in sorted(families.items()):
        if len(keys) < 2:
            continue
        entry: dict = {"tp_degrees": sorted(k.tp for k in keys)}
        for index, (phase, spec) in enumerate((("prefill", POOLED_PREFILL_FEATURES), ("decode", POOLED_DECODE_FEATURES))):
            samples = [s for k in keys for s in by_key[k][index]]
            if not samples:
                continue
            report, errors = _fit_phase(samples, spec, settings, settings.seed)
            by_tp: dict[int, list[float]] = defaultdict(list)
            for sample, error in errors:
                by_tp[sample.key.tp].append(error)  # type: ignore[attr-defined]
            report["heldout_median_ape_by_tp"] = {f"tp{t}": float(np.median(v)) for t, v in sorted(by_tp.items())}
            entry[phase] = report
        pooled[f"{model}/{hardware}"] = entry
    return pooled
