"""Cluster and instance descriptions for ``serving plan`` and ``serving route-sim``.

A cluster is machine types with a number of accelerators each, written either inline,
``a100x8+h100x8`` (``<accelerator>x<gpus>[*<machines>]`` joined by ``+``), or as a TOML
file::

    [[machines]]
    accelerator = "a100-80gb"
    gpus = 8
    count = 2            # optional, default 1

    [engine]             # optional, EngineConfig fields
    memory_fraction = 0.9

Serving instances for the router simulation are ``<accelerator>:tp<t>[x<n>]`` joined by
commas, e.g. ``a100-80gb:tp2x2,h100-80gb:tp2``.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.errors import ClusterSpecError, FitUnavailable
from asrpt.serving.fitset import FitSet
from asrpt.serving.hardware import get_accelerator
from asrpt.serving.memory import check_feasible
from asrpt.serving.models import ModelSpec
from asrpt.serving.request_sim import InstanceSpec

_MACHINE = re.compile(r"^(?P<accelerator>[a-z0-9._\-]+?)x(?P<gpus>\d+)(?:\*(?P<count>\d+))?$")
_INSTANCE = re.compile(r"^(?P<accelerator>[a-z0-9._\-]+):tp(?P<tp>\d+)(?:x(?P<count>\d+))?$")
_MACHINE_KEYS = {"accelerator", "gpus", "count"}


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineType:
    accelerator: str
    gpus: int
    count: int = 1

    @property
    def label(self) -> str:
        return f"{self.accelerator}x{self.gpus}" + (f"*{self.count}" if self.count != 1 else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    machines: tuple[MachineType, ...]
    engine: EngineConfig = EngineConfig()

    @property
    def label(self) -> str:
        return "+".join(m.label for m in self.machines)


def _machine(accelerator: str, gpus: int, count: int, where: str) -> MachineType:
    spec = get_accelerator(accelerator)
    if gpus < 1 or count < 1:
        raise ClusterSpecError(f"{where}: gpus and count must be >= 1")
    return MachineType(accelerator=spec.name, gpus=gpus, count=count)


def parse_cluster(text: str) -> Cluster:
    """An inline description, or the path of a TOML file (ends in ``.toml``)."""
    if text.endswith(".toml"):
        return read_cluster_toml(Path(text))
    machines = []
    for part in text.lower().replace(" ", "").split("+"):
        match = _MACHINE.match(part)
        if not match:
            raise ClusterSpecError(f"cannot parse machine {part!r} in {text!r}; expected <accelerator>x<gpus>[*<machines>], "
                                   "e.g. a100x8+h100x8, or a .toml file")
        machines.append(_machine(match["accelerator"], int(match["gpus"]), int(match["count"] or 1), repr(text)))
    return Cluster(machines=tuple(machines))


def read_cluster_toml(path: Path) -> Cluster:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ClusterSpecError(f"{path}: cannot read: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ClusterSpecError(f"{path}: not TOML: {error}") from error
    unknown = set(document) - {"machines", "engine"}
    if unknown:
        raise ClusterSpecError(f"{path}: unknown section(s) {', '.join(sorted(unknown))}; valid: machines, engine")
    machines = []
    for number, entry in enumerate(document.get("machines", []), start=1):
        where = f"{path}: machines[{number}]"
        extra = set(entry) - _MACHINE_KEYS
        if extra or "accelerator" not in entry or "gpus" not in entry:
            raise ClusterSpecError(f"{where}: needs accelerator and gpus (optional count); "
                                   f"unknown keys: {', '.join(sorted(extra)) or 'none'}")
        machines.append(_machine(str(entry["accelerator"]), int(entry["gpus"]), int(entry.get("count", 1)), where))
    if not machines:
        raise ClusterSpecError(f"{path}: no [[machines]]")
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    engine_values = document.get("engine", {})
    bad = set(engine_values) - engine_fields
    if bad:
        raise ClusterSpecError(f"{path}: unknown engine key(s) {', '.join(sorted(bad))}; valid: {', '.join(sorted(engine_fields))}")
    try:
        engine = EngineConfig(**engine_values)
    except (TypeError, ValueError) as error:
        raise ClusterSpecError(f"{path}: [engine]: {error}") from error
    return Cluster(machines=tuple(machines), engine=engine)


def parse_instances(text: str) -> list[tuple[str, int, int]]:
    """``a100-80gb:tp2x2,h100-80gb:tp2`` -> [(accelerator, tp, count), ...]."""
    entries = []
    for part in text.lower().replace(" ", "").split(","):
        match = _INSTANCE.match(part)
        if not match:
            raise ClusterSpecError(f"cannot parse instance {part!r}; expected <accelerator>:tp<t>[x<n>], "
                                   "e.g. a100-80gb:tp2x2,h100-80gb:tp2")
        entries.append((get_accelerator(match["accelerator"]).name, int(match["tp"]), int(match["count"] or 1)))
    return entries


def build_instances(model: ModelSpec, entries: list[tuple[str, int, int]], fits: FitSet,
                    engine: EngineConfig) -> list[InstanceSpec]:
    """Instance specs with their fitted latency and KV capacity; infeasible or unfitted
    entries raise with the reason."""
    instances = []
    for accelerator, tp, count in entries:
        feasibility = check_feasible(model, get_accelerator(accelerator), tp, engine)
        if not feasibility.feasible:
            raise ClusterSpecError(f"{model.name} on {accelerator}:tp{tp} cannot start: {feasibility.reason}")
        lookup = fits.lookup(model.name, accelerator, tp)
        for n in range(count):
            instances.append(InstanceSpec(name=f"{accelerator}:tp{tp}#{len(instances)}", hardware=accelerator, tp=tp,
                                          latency=lookup.latency, kv_capacity_tokens=feasibility.kv_capacity_tokens))
    return instances


def default_instances(model: ModelSpec, fits: FitSet, engine: EngineConfig) -> list[tuple[str, int, int]]:
    """One instance per accelerator type fitted for ``model``, each at its smallest fitted
    TP degree that can start: the heterogeneous mix the fit itself describes."""
    entries = []
    for accelerator in fits.hardware_for(model.name):
        spec = get_accelerator(accelerator)
        for tp in fits.tp_degrees(model.name, accelerator):
            if check_feasible(model, spec, tp, engine).feasible:
                entries.append((accelerator, tp, 1))
                break
    if not entries:
        raise FitUnavailable(f"no fitted accelerator can hold {model.name}")
    return entries
