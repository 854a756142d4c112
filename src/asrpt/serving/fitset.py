"""Fitted latency models loaded from a ``serving fit`` document, looked up by key.

The optimiser and the simulators ask for "llama2-70b on h100-80gb at TP 4"; this answers
from the per-degree fit when that degree was profiled and from the pooled fit (TP as a
feature) otherwise, and says which it used so a plan can flag extrapolated degrees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from asrpt.serving.errors import FitUnavailable, ProfileFormatError
from asrpt.serving.hardware import canonical_accelerator_name
from asrpt.serving.latency_model import DecodeModel, InstanceLatency, PrefillModel, pooled_at_tp
from asrpt.serving.models import canonical_model_name
from asrpt.serving.profiles import ProfileKey


@dataclass(frozen=True, slots=True)
class LatencyLookup:
    latency: InstanceLatency
    #: "fitted" (this degree was profiled) or "pooled" (predicted from other degrees).
    source: str


class FitSet:
    """Immutable map from (model, accelerator, TP) to an :class:`InstanceLatency`."""

    def __init__(self, fitted: Mapping[ProfileKey, InstanceLatency],
                 pooled: Mapping[tuple[str, str], tuple[dict, dict]] | None = None) -> None:
        self._fitted = dict(fitted)
        self._pooled = dict(pooled or {})

    @classmethod
    def from_document(cls, document: Mapping, *, origin: str = "fit document") -> "FitSet":
        try:
            fits = document["fits"]
            fitted = {}
            for label, entry in fits.items():
                key = ProfileKey.parse(label)
                fitted[key] = InstanceLatency(
                    prefill=PrefillModel.from_coefficients(entry["prefill"]["coefficients"]),
                    decode=DecodeModel.from_coefficients(entry["decode"]["coefficients"]),
                )
            pooled = {}
            for label, entry in (document.get("pooled") or {}).items():
                model, hardware = label.rsplit("/", 1)
                pooled[(model, hardware)] = (dict(entry["prefill"]["coefficients"]), dict(entry["decode"]["coefficients"]))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ProfileFormatError(f"{origin}: not a `serving fit` document ({error!r})") from None
        if not fitted:
            raise ProfileFormatError(f"{origin}: no fits")
        return cls(fitted, pooled)

    @classmethod
    def load(cls, path: str | Path) -> "FitSet":
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise ProfileFormatError(f"{path}: cannot read: {error.strerror or error}") from error
        except json.JSONDecodeError as error:
            raise ProfileFormatError(f"{path}:{error.lineno}: not JSON: {error.msg}") from error
        return cls.from_document(document, origin=str(path))

    def keys(self) -> list[ProfileKey]:
        return sorted(self._fitted)

    def models(self) -> list[str]:
        return sorted({k.model for k in self._fitted})

    def hardware_for(self, model: str) -> list[str]:
        model = canonical_model_name(model)
        return sorted({k.hardware for k in self._fitted if k.model == model})

    def tp_degrees(self, model: str, hardware: str) -> list[int]:
        model, hardware = canonical_model_name(model), canonical_accelerator_name(hardware)
        return sorted(k.tp for k in self._fitted if k.model == model and k.hardware == hardware)

    def lookup(self, model: str, hardware: str, tp: int) -> LatencyLookup:
        """The model for ``tp`` GPUs; raises :class:`FitUnavailable` naming what exists."""
        key = ProfileKey(model=canonical_model_name(model), hardware=canonical_accelerator_name(hardware), tp=tp)
        if key in self._fitted:
            return LatencyLookup(self._fitted[key], "fitted")
        if (key.model, key.hardware) in self._pooled:
            prefill, decode = self._pooled[(key.model, key.hardware)]
            return LatencyLookup(pooled_at_tp(prefill, decode, tp), "pooled")
        available = ", ".join(k.label for k in self.keys()) or "none"
        raise FitUnavailable(f"no latency fit for {key.label}; fitted: {available}")

    def latency(self, model: str, hardware: str, tp: int) -> InstanceLatency:
        return self.lookup(model, hardware, tp).latency
