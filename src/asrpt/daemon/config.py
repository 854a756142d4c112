"""The daemon's configuration: ``/etc/asrpt/asrpt.toml`` with ``ASRPT_*`` environment overrides.

Read and validated once at start-up into one frozen object that is passed down explicitly. An
unknown key is an error that names the key and lists the valid ones: a typo must not silently
become a default on a production scheduler.

Environment overrides use ``ASRPT_<SECTION>_<KEY>`` (``ASRPT_DAEMON_INTERVAL_S=10``,
``ASRPT_DATABASE_URL=postgresql+psycopg://...``), plus ``ASRPT_CONFIG`` for the file path.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from asrpt import paths
from asrpt.exceptions import ConfigError

DEFAULT_CONFIG_PATH = Path(paths.DEFAULT_CONFIG_PATH)
POLICY_NAMES = ("asrpt", "asrpt-strict", "fifo", "spwf", "qssf", "multifactor")


@dataclass(frozen=True, slots=True)
class DaemonSection:
    #: Seconds between scheduling cycles.
    interval_s: float = 30.0
    #: Which policy writes priorities (A-SRPT by default; baselines for A/B on a real cluster).
    policy: str = "asrpt"
    #: Seconds between retraining the iteration predictor.
    retrain_interval_s: float = 3600.0
    #: Seconds between reading finished jobs from Slurm.
    sync_interval_s: float = 60.0
    #: ``host:port`` of the read-only HTTP endpoint; empty disables it.
    http_bind: str = ""
    state_dir: str = paths.DEFAULT_STATE_DIR
    #: Longest back-off after consecutive failed cycles, seconds.
    max_backoff_s: float = 300.0


@dataclass(frozen=True, slots=True)
class DatabaseSection:
    url: str = paths.DEFAULT_DATABASE_URL


@dataclass(frozen=True, slots=True)
class SlurmSection:
    #: slurm.conf to use (exported as SLURM_CONF to the commands); empty means Slurm's default.
    conf: str = ""
    #: Directory of squeue/scontrol/sinfo/sacct; empty means /usr/bin.
    bin_dir: str = "/usr/bin"
    command_timeout_s: float = 20.0
    #: Job completion log written by ``JobCompType=jobcomp/filetxt``; empty to use sacct only.
    jobcomp_log: str = ""


@dataclass(frozen=True, slots=True)
class SchedulerSection:
    mode: str = "backfill"
    queue_order: str = "virtual_completion"
    comm_heavy_ratio: float = 1.5
    comm_heavy_tau: float = 0.1
    #: ``zero`` (the paper: unseen jobs predict 0 iterations and go first) or ``fallback``.
    unseen_policy: str = "zero"
    #: Workload class assumed for jobs that do not say (``#ASRPT class=...``).
    default_workload_class: str = "resnet50"


@dataclass(frozen=True, slots=True)
class SpoolSection:
    dir: str = paths.DEFAULT_SPOOL_DIR
    #: Records older than this whose job Slurm never reports are discarded, seconds.
    max_age_s: float = 86400.0


@dataclass(frozen=True, slots=True)
class WrapperSection:
    real_sbatch: str = "/usr/bin/sbatch"


@dataclass(frozen=True, slots=True)
class PartitionSection:
    name: str
    accelerator: str
    intra_node_gbps: float = 150.0
    inter_node_gbps: float = 12.5
    relative_speed: float | None = None
    relative_to: str = "a100"


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    daemon: DaemonSection = field(default_factory=DaemonSection)
    database: DatabaseSection = field(default_factory=DatabaseSection)
    slurm: SlurmSection = field(default_factory=SlurmSection)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    spool: SpoolSection = field(default_factory=SpoolSection)
    wrapper: WrapperSection = field(default_factory=WrapperSection)
    partitions: tuple[PartitionSection, ...] = ()
    #: Where it was read from (for messages).
    source: str = "<defaults>"


_SECTIONS: dict[str, type] = {
    "daemon": DaemonSection,
    "database": DatabaseSection,
    "slurm": SlurmSection,
    "scheduler": SchedulerSection,
    "spool": SpoolSection,
    "wrapper": WrapperSection,
}
_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("daemon", "policy"): POLICY_NAMES,
    ("scheduler", "mode"): ("strict", "backfill", "greedy"),
    ("scheduler", "queue_order"): ("virtual_completion", "remaining"),
    ("scheduler", "unseen_policy"): ("zero", "fallback"),
}


def load_config(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> DaemonConfig:
    """Read ``path`` (default ``$ASRPT_CONFIG`` or /etc/asrpt/asrpt.toml; a missing default
    file means all defaults), apply ``ASRPT_<SECTION>_<KEY>`` overrides and validate."""
    env = os.environ if environ is None else environ
    explicit = path is not None or "ASRPT_CONFIG" in env
    config_path = Path(path if path is not None else env.get("ASRPT_CONFIG", DEFAULT_CONFIG_PATH))
    document: dict[str, Any] = {}
    if config_path.exists():
        try:
            document = tomllib.loads(config_path.read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{config_path}: cannot read: {error}") from None
    elif explicit:
        raise ConfigError(f"{config_path}: no such configuration file")
    return parse_config(document, env, source=str(config_path))


def parse_config(document: Mapping[str, Any], environ: Mapping[str, str], source: str = "<memory>") -> DaemonConfig:
    valid_top = sorted([*_SECTIONS, "partitions"])
    unknown = [k for k in document if k not in valid_top]
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}]; valid sections: {', '.join(valid_top)}")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        raw = document.get(name, {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        values = dict(raw)
        for f in fields(cls):
            env_key = f"ASRPT_{name.upper()}_{f.name.upper()}"
            if env_key in environ:
                values[f.name] = environ[env_key]
        sections[name] = _build(cls, values, f"[{name}]", source)
    partitions = document.get("partitions", [])
    if not isinstance(partitions, list):
        raise ConfigError(f"{source}: partitions must be an array of tables ([[partitions]])")
    parts = tuple(_build(PartitionSection, dict(p), f"[[partitions]] #{i + 1}", source) for i, p in enumerate(partitions))
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: partition names must be unique, got {names}")
    return DaemonConfig(**sections, partitions=parts, source=source)


def _build(cls: type, values: dict[str, Any], where: str, source: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{source}: unknown key {key!r} in {where}; valid keys: {', '.join(sorted(known))}")
    converted: dict[str, Any] = {}
    for key, value in values.items():
        converted[key] = _convert(value, known[key].type, f"{where} {key}", source)
        section = where.strip("[]")
        choices = _CHOICES.get((section, key))
        if choices and converted[key] not in choices:
            raise ConfigError(f"{source}: {where} {key} = {converted[key]!r} is not one of {', '.join(choices)}")
        if isinstance(converted[key], float) and key.endswith(("_s", "_gbps", "ratio", "tau", "speed")) and converted[key] < 0:
            raise ConfigError(f"{source}: {where} {key} must be >= 0, got {converted[key]}")
    missing = [name for name, f in known.items() if name not in converted and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ConfigError(f"{source}: {where} is missing required key(s): {', '.join(missing)}")
    return cls(**converted)


def _convert(value: Any, annotation: Any, what: str, source: str) -> Any:
    kind = str(annotation)
    try:
        if kind.startswith("float"):
            if value is None or (isinstance(value, str) and value == "" and "None" in kind):
                return None
            if isinstance(value, bool):
                raise ValueError("a boolean")
            return float(value)
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError(f"{type(value).__name__}")
            return value
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {what} must be a {kind.split(' ')[0]}, got {value!r} ({error})") from None
    return value
