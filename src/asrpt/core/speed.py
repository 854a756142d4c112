"""Heterogeneous speed model: how long one micro-batch takes per workload class and accelerator.

The table is a matrix ``step_time_s[workload_class, accelerator]`` with explicit labels (Gavel's
throughput matrix, inverted to seconds). Accelerator types are data, never literals in logic:
an NPU or any other type without a public profile is added with
:meth:`SpeedTable.with_relative_speed`, and traces' spellings ("V100M32", "MISC", "dgx") are
aliases. Every policy and placement takes the table as an argument; nothing looks it up
globally except :func:`default_speed_table`, which loads the packaged data file once.

The packaged numbers are derived by ``scripts/build_speed_table.py`` (see
``asrpt/data/README.md``): measured where Gavel or Sia measured them, filled by a documented
ratio rule elsewhere. Communication sizes per class (:class:`WorkloadProfile`) are our
reconstruction from public architecture sizes, not measurements.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["WorkloadProfile", "SpeedTable", "default_speed_table"]

_SEPARATORS = re.compile(r"[\s_\-]+")


@functools.lru_cache(maxsize=4096)
def _norm(name: str) -> str:
    """Lookup key: case-insensitive, ignoring '-', '_' and spaces ("V100M32" == "v100-m32").
    Cached on purpose: a pure function of small immutable, hashable arguments, asked for the
    same few again and again; a bounded cache of such cannot change an answer."""
    return _SEPARATORS.sub("", name.strip().lower())


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """Bytes a workload class moves, whole model, independent of the accelerator.

    Our reconstruction from public architecture sizes (fp32); see ``PROFILES`` in
    ``scripts/build_speed_table.py``. The communication model splits these per stage and per
    tensor-parallel rank (``asrpt.core.comm``).
    """

    name: str
    #: Gradient bytes all-reduced by data parallelism once per iteration (= parameter bytes), GB.
    params_gb: float
    #: Activation bytes crossing one pipeline-stage boundary per micro-batch (forward), GB.
    activation_gb_per_microbatch: float
    #: Bytes all-reduced by tensor parallelism per micro-batch over all layers, forward+backward, GB.
    tp_allreduce_gb_per_microbatch: float

    def __post_init__(self) -> None:
        for field_name in ("params_gb", "activation_gb_per_microbatch", "tp_allreduce_gb_per_microbatch"):
            value = getattr(self, field_name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"WorkloadProfile {self.name}: {field_name} must be finite and >= 0, got {value!r}")


class SpeedTable:
    """Seconds per micro-batch for each (workload class, accelerator type); immutable.

    Lookups are case-insensitive and ignore '-', '_' and spaces, and resolve aliases. Equal
    tables hash equal, so callers may use a table as a cache key.

    Parameters
    ----------
    workload_classes, accelerators
        Row and column labels (canonical names, shown in error messages).
    step_time_s
        Matrix of shape (classes, accelerators): seconds for one accelerator to run forward and
        backward of one micro-batch of the whole model. Must be finite and > 0.
    profiles
        Communication sizes per class (every class needs one).
    accelerator_aliases, class_aliases
        Extra names mapping to a canonical label.
    origin
        Optional label per cell ("measured:gavel", "filled:...", "relative:..."), for reports.
    """

    __slots__ = (
        "_classes", "_accs", "_steps", "_profiles", "_acc_index", "_cls_index",
        "_acc_aliases", "_cls_aliases", "_origin", "_key", "_hash",
    )

    def __init__(
        self,
        *,
        workload_classes: Sequence[str],
        accelerators: Sequence[str],
        step_time_s: Any,
        profiles: Mapping[str, WorkloadProfile],
        accelerator_aliases: Mapping[str, str] | None = None,
        class_aliases: Mapping[str, str] | None = None,
        origin: Sequence[Sequence[str]] | None = None,
    ) -> None:
        classes = tuple(c.lower() for c in workload_classes)
        accs = tuple(a.lower() for a in accelerators)
        steps = np.array(step_time_s, dtype=float)
        if steps.shape != (len(classes), len(accs)):
            raise ValueError(f"step_time_s has shape {steps.shape}, expected {(len(classes), len(accs))}")
        if not np.all(np.isfinite(steps)) or np.any(steps <= 0):
            raise ValueError("step_time_s must be finite and > 0 in every cell")
        steps.setflags(write=False)
        cls_index = {_norm(c): i for i, c in enumerate(classes)}
        acc_index = {_norm(a): i for i, a in enumerate(accs)}
        if len(cls_index) != len(classes) or len(acc_index) != len(accs):
            raise ValueError("duplicate workload class or accelerator name")
        missing = [c for c in classes if not any(_norm(k) == _norm(c) for k in profiles)]
        if missing:
            raise ValueError(f"no WorkloadProfile for classes {missing}")
        prof = {_norm(k): v for k, v in profiles.items() if _norm(k) in cls_index}
        acc_aliases = {_norm(k): _norm(v) for k, v in (accelerator_aliases or {}).items()}
        cls_aliases = {_norm(k): _norm(v) for k, v in (class_aliases or {}).items()}
        for alias, target in acc_aliases.items():
            if target not in acc_index:
                raise ValueError(f"accelerator alias {alias!r} points to unknown {target!r}")
        for alias, target in cls_aliases.items():
            if target not in cls_index:
                raise ValueError(f"class alias {alias!r} points to unknown {target!r}")
        if origin is None:
            origin_t = tuple(tuple("given" for _ in accs) for _ in classes)
        else:
            origin_t = tuple(tuple(row) for row in origin)
            if len(origin_t) != len(classes) or any(len(r) != len(accs) for r in origin_t):
                raise ValueError("origin must have the same shape as step_time_s")
        self._classes = classes
        self._accs = accs
        self._steps = steps
        self._profiles = MappingProxyType(prof)
        self._cls_index = cls_index
        self._acc_index = acc_index
        self._acc_aliases = acc_aliases
        self._cls_aliases = cls_aliases
        self._origin = origin_t
        self._key = (
            classes,
            accs,
            steps.tobytes(),
            tuple(sorted((k, v.params_gb, v.activation_gb_per_microbatch, v.tp_allreduce_gb_per_microbatch)
                         for k, v in prof.items())),
            tuple(sorted(acc_aliases.items())),
            tuple(sorted(cls_aliases.items())),
        )
        self._hash = hash(self._key)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SpeedTable":
        """Build a table from the ``speed_table.json`` document (format asrpt-speed-table/1)."""
        classes = list(data["workload_classes"])
        accs = list(data["accelerators"])
        steps = [[float(data["step_time_s"][c][a]) for a in accs] for c in classes]
        origin_doc = data.get("origin") or {}
        origin = [[str(origin_doc.get(c, {}).get(a, "given")) for a in accs] for c in classes]
        profiles = {
            c: WorkloadProfile(
                name=c,
                params_gb=float(p["params_gb"]),
                activation_gb_per_microbatch=float(p["activation_gb_per_microbatch"]),
                tp_allreduce_gb_per_microbatch=float(p["tp_allreduce_gb_per_microbatch"]),
            )
            for c, p in data["profiles"].items()
        }
        return cls(
            workload_classes=classes,
            accelerators=accs,
            step_time_s=steps,
            profiles=profiles,
            accelerator_aliases=data.get("accelerator_aliases") or {},
            class_aliases=data.get("workload_class_aliases") or {},
            origin=origin,
        )

    def with_relative_speed(
        self, accelerator: str, factor: float, reference: str, *, aliases: Sequence[str] = ()
    ) -> "SpeedTable":
        """A new table with one more accelerator type, ``factor`` times as fast as ``reference``.

        How a type without a public profile (an NPU such as "npu-910b") is configured: its step
        time for every class is ``step_time_s(class, reference) / factor``. ``aliases`` adds
        other names for it (e.g. "910b").
        """
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise ValueError(f"relative speed factor must be finite and > 0, got {factor!r}")
        ref = self._acc_col(reference)
        new_names = [accelerator, *aliases]
        taken = [n for n in new_names if self.knows(n)]
        if taken:
            raise ValueError(f"accelerator name(s) {taken} already known; valid: {list(self._accs)}")
        column = self._steps[:, ref] / float(factor)
        steps = np.column_stack([self._steps, column])
        label = f"relative:{self._accs[ref]}/{factor:g}"
        origin = [list(row) + [label] for row in self._origin]
        acc_aliases = dict(self._acc_aliases)
        acc_aliases.update({a: accelerator for a in aliases})
        return SpeedTable(
            workload_classes=self._classes,
            accelerators=(*self._accs, accelerator),
            step_time_s=steps,
            profiles=dict(self._profiles),
            accelerator_aliases=acc_aliases,
            class_aliases=self._cls_aliases,
            origin=origin,
        )

    # -- lookups --------------------------------------------------------------------------

    @property
    def workload_classes(self) -> tuple[str, ...]:
        return self._classes

    @property
    def accelerators(self) -> tuple[str, ...]:
        return self._accs

    def knows(self, accelerator: str) -> bool:
        """Whether ``accelerator`` (or an alias of it) has a column."""
        key = _norm(accelerator)
        return key in self._acc_index or key in self._acc_aliases

    def knows_class(self, workload_class: str) -> bool:
        key = _norm(workload_class)
        return key in self._cls_index or key in self._cls_aliases

    def canonical_accelerator(self, accelerator: str) -> str:
        """The column label ``accelerator`` resolves to (e.g. "V100M32" -> "v100")."""
        return self._accs[self._acc_col(accelerator)]

    def canonical_class(self, workload_class: str) -> str:
        return self._classes[self._cls_row(workload_class)]

    def step_time_s(self, workload_class: str, accelerator: str) -> float:
        """Seconds for ONE ``accelerator`` to run forward+backward of ONE micro-batch of the whole model."""
        return float(self._steps[self._cls_row(workload_class), self._acc_col(accelerator)])

    def profile(self, workload_class: str) -> WorkloadProfile:
        return self._profiles[_norm(self._classes[self._cls_row(workload_class)])]

    def origin(self, workload_class: str, accelerator: str) -> str:
        """Where a cell's number comes from ("measured:gavel", "filled:...", "relative:...")."""
        return self._origin[self._cls_row(workload_class)][self._acc_col(accelerator)]

    def _acc_col(self, accelerator: str) -> int:
        key = _norm(accelerator)
        idx = self._acc_index.get(key)
        if idx is None:
            idx = self._acc_index.get(self._acc_aliases.get(key, ""))
        if idx is None:
            raise KeyError(
                f"unknown accelerator {accelerator!r}; valid: {list(self._accs)} "
                f"(aliases: {sorted(self._acc_aliases)}); add a type with with_relative_speed()"
            )
        return idx

    def _cls_row(self, workload_class: str) -> int:
        key = _norm(workload_class)
        idx = self._cls_index.get(key)
        if idx is None:
            idx = self._cls_index.get(self._cls_aliases.get(key, ""))
        if idx is None:
            raise KeyError(f"unknown workload class {workload_class!r}; valid: {list(self._classes)}")
        return idx

    # -- value semantics ------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpeedTable) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"SpeedTable({len(self._classes)} classes x accelerators {list(self._accs)})"


@functools.cache
def default_speed_table() -> SpeedTable:
    """The packaged table (Gavel + Sia derived), loaded once per process."""
    text = resources.files("asrpt").joinpath("data/speed_table.json").read_text(encoding="utf-8")
    return SpeedTable.from_dict(json.loads(text))
