"""The daemon's configuration: ``/etc/asrpt/asrpt.toml`` with ``ASRPT_*`` environment overrides.

Read and validated once at start-up into one frozen object that is passed down explicitly. An
unknown key is an error that names the key and lists the valid ones: a typo must not silently
become a default on a production scheduler.

Environment overrides use ``ASRPT_<SECTION>_<KEY>`` (``ASRPT_DAEMON_INTERVAL_S=10``,
``ASRPT_DATABASE_URL=postgresql+psycopg://...``), plus ``ASRPT_CONFIG`` for the file path.
"""

from __future__ import annotations

import logging
import math
import os
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from asrpt import paths
from asrpt.core.model import Partition
from asrpt.core.prediction import (
    DEFAULT_RF_ESTIMATE,
    DEFAULT_RF_UNSEEN_POLICY,
    DEFAULT_RF_UNSEEN_REFERENCE,
    ESTIMATES,
    UNSEEN_POLICIES,
    UNSEEN_REFERENCES,
)
from asrpt.core.speed import default_speed_table
from asrpt.exceptions import ConfigError
from asrpt.serving.hardware import find_accelerator, known_accelerator_names
from asrpt.slurm.cli_backend import SlurmBackendConfig

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path(paths.DEFAULT_CONFIG_PATH)
POLICY_NAMES = ("asrpt", "asrpt-preempt", "asrpt-strict", "fifo", "spwf", "qssf", "multifactor")


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
    #: Host names the endpoint answers besides this machine's own (a reverse proxy's public
    #: name when it forwards ``Host: $host``); any other Host header gets 421 (DNS rebinding).
    http_allowed_hosts: tuple[str, ...] = ()
    #: Directory of the daemon's own state (the SQLite database by default, the trained model).
    state_dir: str = paths.DEFAULT_STATE_DIR
    #: Longest back-off after consecutive failed cycles, seconds.
    max_backoff_s: float = 300.0
    #: asrptd's Unix socket, serving ``asrpt queue/eta/explain`` to every user with Slurm's
    #: PrivateData applied for the caller's uid (SO_PEERCRED); an absolute path, or "" for none.
    socket_path: str = paths.DEFAULT_SOCKET_PATH
    #: On stop (SIGTERM), release the holds asrpt placed, so no job waits for a daemon that
    #: is gone; off for sites that restart often and prefer the holds to survive restarts.
    release_holds_on_stop: bool = True


@dataclass(frozen=True, slots=True)
class DatabaseSection:
    #: The daemon's database; it writes there (keep a password out of a file users read).
    url: str = paths.DEFAULT_DATABASE_URL
    #: What ``asrpt queue/eta/explain`` use when they read the database themselves (asrptd's
    #: socket not answering): a read-only role (``asrpt db grant-reader``); "" = ``url``.
    read_url: str = ""


@dataclass(frozen=True, slots=True)
class SchedulerSection:
    #: Dispatch: ``strict`` head-of-line order (the paper), ``backfill`` (later jobs start only
    #: when, by predicted runtimes, they do not delay the blocked head) or ``greedy``.
    mode: str = "backfill"
    #: ``work`` (Q by predicted work), ``virtual_completion`` (the paper) or ``remaining``.
    queue_order: str = "work"
    #: ``work`` order: the longest-waiting job pending at least this long heads the queue;
    #: ``inf`` turns the starvation guard off.
    overdue_after_s: float = 7 * 86400.0
    #: A job whose communication cost (alpha) on its best placement now is this many times its
    #: best possible is communication-heavy and may wait for a consolidated placement ...
    comm_heavy_ratio: float = 1.5
    #: ... for at most this many multiples of its ideal runtime.
    comm_heavy_tau: float = 0.1
    #: Jobs examined behind the first blocked one per cycle (like Slurm's bf_max_job_test).
    backfill_depth: int = 100
    #: ``cluster`` (one virtual machine, the paper) or ``pool`` (one per set of partitions).
    virtual_machine: str = "cluster"
    #: Jobs with no group history: ``model`` (the default: the forest's correction, from the
    #: request and the user's history, to the user's or global median), ``fallback`` (that
    #: median alone) or ``zero`` (the paper: predict 0 iterations, they go first).
    unseen_policy: str = DEFAULT_RF_UNSEEN_POLICY
    #: Which point of the forest's distribution a prediction is: ``median`` (trees averaged
    #: in log space), ``mean`` (in linear space: expected work) or ``lognormal``.
    estimate: str = DEFAULT_RF_ESTIMATE
    #: Where the prediction of a job without group history starts: ``time_limit`` (its limit
    #: scaled by the typical iterations / limit ratio) or ``history`` (user's, global median).
    unseen_reference: str = DEFAULT_RF_UNSEEN_REFERENCE
    #: Cap predicted iterations at what fits in the job's time limit (false: the paper).
    time_limit_cap: bool = True
    #: ``asrpt-preempt`` (``[daemon] policy``): a running job that Slurm may requeue (submitted
    #: with ``--requeue``; set ``JobRequeue=0`` in slurm.conf so that only such jobs are) is
    #: requeued for waiting jobs of at most 1/ratio of its predicted remaining work ...
    preempt_ratio: float = 4.0
    #: ... and never in its first seconds after a (re)start (like Slurm's PreemptExemptTime) ...
    preempt_exempt_s: float = 600.0
    #: ... and at most this many times per job.
    max_requeues: int = 3


@dataclass(frozen=True, slots=True)
class SpoolSection:
    #: Where asrpt-sbatch drops one record per submission (job script hints) for asrptd.
    dir: str = paths.DEFAULT_SPOOL_DIR
    #: Records older than this whose job Slurm never reports are discarded, seconds.
    max_age_s: float = 86400.0
    #: Where contrib/slurm/job_submit.lua writes its records (its SPOOL_DIR); "" = not read.
    plugin_dir: str = ""
    #: Users whose files in plugin_dir are trusted: slurmctld's SlurmUser (root by default).
    plugin_owners: tuple[str, ...] = ("root",)


@dataclass(frozen=True, slots=True)
class WrapperSection:
    #: The sbatch that asrpt-sbatch runs after recording the submission.
    real_sbatch: str = "/usr/bin/sbatch"


@dataclass(frozen=True, slots=True)
class ServingSection:
    """``[serving]``: deployment plans for jobs that say ``#ASRPT serve-model=NAME``.

    ``plan`` is one path or a list of paths, each a JSON file written by ``asrpt serving plan
    --model NAME --json-out FILE`` (one model per file), or a directory whose ``*.json`` files are
    such plans. A plan is read at start and re-read when its file changes; an unreadable plan
    is logged and its model's jobs are scheduled as ordinary jobs. Empty: no serving plans.
    """

    #: Serving plan files or directories of them (see above).
    plan: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionSection:
    """One ``[[slurm.partitions]]``: nodes of one accelerator type and one interconnect."""

    #: The Slurm partition holding the nodes.
    name: str
    #: The speed-table accelerator type of its nodes (``a100``, ``v100``, ``t4``...).
    accelerator: str
    #: Bandwidth between accelerators of one node, GB/s.
    intra_node_gbps: float = 150.0
    #: Bandwidth between nodes, GB/s.
    inter_node_gbps: float = 12.5
    #: For an accelerator the speed table lacks (an NPU): its speed relative to ``relative_to``.
    relative_speed: float | None = None
    #: The speed-table type that ``relative_speed`` is relative to.
    relative_to: str = "a100"
    #: The serving tools' name of this accelerator (``a100-80gb``, ``a100-40gb``...), to match
    #: a serving plan's machine types; default: ``accelerator`` looked up among their aliases.
    serving_accelerator: str | None = None

    def partition(self) -> Partition:
        return Partition(
            name=self.name,
            accelerator=self.accelerator,
            intra_node_gbps=self.intra_node_gbps,
            inter_node_gbps=self.inter_node_gbps,
        )


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    daemon: DaemonSection = field(default_factory=DaemonSection)
    database: DatabaseSection = field(default_factory=DatabaseSection)
    #: ``[slurm]``: the keys are the fields of ``SlurmBackendConfig`` (partitions included).
    slurm: SlurmBackendConfig = field(default_factory=SlurmBackendConfig)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    spool: SpoolSection = field(default_factory=SpoolSection)
    wrapper: WrapperSection = field(default_factory=WrapperSection)
    serving: ServingSection = field(default_factory=ServingSection)
    #: ``[[slurm.partitions]]`` as written (with the relative speeds the backend does not need).
    partitions: tuple[PartitionSection, ...] = ()
    #: Where it was read from (for messages).
    source: str = "<defaults>"


_SECTIONS: dict[str, type] = {
    "daemon": DaemonSection,
    "database": DatabaseSection,
    "scheduler": SchedulerSection,
    "spool": SpoolSection,
    "wrapper": WrapperSection,
    "serving": ServingSection,
}
_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("daemon", "policy"): POLICY_NAMES,
    ("scheduler", "mode"): ("strict", "backfill", "greedy"),
    ("scheduler", "queue_order"): ("work", "virtual_completion", "remaining"),
    ("scheduler", "virtual_machine"): ("cluster", "pool"),
    ("scheduler", "unseen_policy"): UNSEEN_POLICIES,
    ("scheduler", "estimate"): ESTIMATES,
    ("scheduler", "unseen_reference"): UNSEEN_REFERENCES,
}
#: Seconds that must be finite and at least this: a cycle, sync or retrain at 0 s is a busy
#: loop against slurmctld (tests run cycles at 0.5 s), a 0 s back-off retries a failing Slurm
#: at once, and a command timeout below a second fails every call of a busy slurmctld.
_MIN_SECONDS: dict[tuple[str, str], float] = {
    ("daemon", "interval_s"): 0.1,
    ("daemon", "sync_interval_s"): 0.1,
    ("daemon", "retrain_interval_s"): 0.1,
    ("daemon", "max_backoff_s"): 0.1,
    ("slurm", "timeout_s"): 1.0,
}
#: Floats that may be infinite (documented as "off"); every other one must be finite.
_INFINITE_OK = frozenset({("scheduler", "overdue_after_s")})
_MIN_INT: dict[tuple[str, str], int] = {("scheduler", "backfill_depth"): 0, ("scheduler", "max_requeues"): 0}
#: Hosts that listen on every interface.
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "*"})


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
    valid_top = sorted([*_SECTIONS, "slurm"])
    unknown = [k for k in document if k not in valid_top]
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}]; valid sections: {', '.join(valid_top)}")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        sections[name] = _build(cls, _with_env(document, name, cls, environ, source), f"[{name}]", source)
    slurm_values = _with_env(document, "slurm", SlurmBackendConfig, environ, source)
    raw_partitions = slurm_values.pop("partitions", [])
    if not isinstance(raw_partitions, list) or not all(isinstance(p, dict) for p in raw_partitions):
        raise ConfigError(f"{source}: slurm.partitions must be an array of tables ([[slurm.partitions]])")
    parts = tuple(
        _build(PartitionSection, dict(p), f"[[slurm.partitions]] #{i + 1}", source) for i, p in enumerate(raw_partitions)
    )
    for i, part in enumerate(parts):
        if part.serving_accelerator is not None and find_accelerator(part.serving_accelerator) is None:
            raise ConfigError(
                f"{source}: [[slurm.partitions]] #{i + 1} serving_accelerator = {part.serving_accelerator!r} is not "
                f"an accelerator the serving tools know; known: {', '.join(known_accelerator_names())}"
            )
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: partition names must be unique, got {names}")
    slurm_values["partitions"] = tuple(p.partition() for p in parts)
    try:
        slurm = _build(SlurmBackendConfig, slurm_values, "[slurm]", source)
    except ConfigError as error:
        raise ConfigError(str(error) if str(error).startswith(source) else f"{source}: {error}") from None
    config = DaemonConfig(**sections, slurm=slurm, partitions=parts, source=source)
    _check(config)
    return config


def _check(config: DaemonConfig) -> None:
    """What no single value shows: relations between keys, files, the speed table."""
    source, daemon = config.source, config.daemon
    if daemon.max_backoff_s < daemon.interval_s:
        raise ConfigError(
            f"{source}: [daemon] max_backoff_s = {daemon.max_backoff_s} is below [daemon] interval_s = "
            f"{daemon.interval_s}; the wait after failed cycles grows from interval_s up to max_backoff_s, "
            "so it must be >= interval_s"
        )
    scheduler = config.scheduler
    if scheduler.preempt_ratio < 1:
        raise ConfigError(f"{source}: [scheduler] preempt_ratio = {scheduler.preempt_ratio} must be >= 1: a waiting job "
                          "may displace a running one only if it has at most 1/ratio of its remaining work")  # fmt: skip
    if daemon.socket_path and not os.path.isabs(daemon.socket_path):
        raise ConfigError(f"{source}: [daemon] socket_path = {daemon.socket_path!r} is not valid: an absolute path "
                          f"(default {paths.DEFAULT_SOCKET_PATH}), or \"\" for no socket")  # fmt: skip
    conf = config.slurm.slurm_conf
    if conf and not os.path.isfile(conf):
        raise ConfigError(f"{source}: [slurm] slurm_conf = {conf!r} is not a file; give slurm.conf's path, or leave "
                          "the key out to use the environment's SLURM_CONF")  # fmt: skip
    table = default_speed_table()
    known = ", ".join(table.accelerators)
    for i, part in enumerate(config.partitions):
        where = f"{source}: [[slurm.partitions]] #{i + 1}"
        if part.relative_speed is not None and not (math.isfinite(part.relative_speed) and part.relative_speed > 0):
            raise ConfigError(f"{where} relative_speed = {part.relative_speed} is not valid: a finite factor > 0 "
                              f"(its speed relative to relative_to = {part.relative_to!r})")  # fmt: skip
        if table.knows(part.accelerator):
            continue
        if part.relative_speed is None:
            raise ConfigError(
                f"{where} accelerator = {part.accelerator!r} is not in the speed table ({known}); for a type "
                "without a profile give relative_speed (its speed as a factor of relative_to, default a100)"
            )
        if not table.knows(part.relative_to):
            raise ConfigError(f"{where} relative_to = {part.relative_to!r} is not in the speed table ({known})")
    if daemon.http_allowed_hosts:
        from asrpt.daemon.http import host_name

        for name in daemon.http_allowed_hosts:
            try:
                host_name(name)
            except ValueError:
                raise ConfigError(
                    f"{source}: [daemon] http_allowed_hosts: {name!r} is not a host name (a name or name:port, as in a "
                    "Host header, e.g. queue.example.org)"
                ) from None
    host = _bind_host(daemon.http_bind)
    if host in _WILDCARD_HOSTS:
        log.warning(
            "%s: [daemon] http_bind = %r listens on every network interface; its answers name users and jobs. "
            "Bind 127.0.0.1 behind a reverse proxy with TLS and authentication (contrib/slurm/README-http.md)",
            source, daemon.http_bind,
        )  # fmt: skip


def _bind_host(bind: str) -> str | None:
    """The host of ``host:port``/``[v6]:port`` (None for a bare port: 127.0.0.1); syntax errors
    are left to the HTTP server's own parser."""
    text = bind.strip()
    if text.startswith("[") and "]" in text:
        return text[1 : text.index("]")]
    if ":" in text:
        return text.rsplit(":", 1)[0] or None
    return None


def _with_env(document: Mapping[str, Any], name: str, cls: type, environ: Mapping[str, str], source: str) -> dict[str, Any]:
    raw = document.get(name, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    values = dict(raw)
    for f in fields(cls):
        env_key = f"ASRPT_{name.upper()}_{f.name.upper()}"
        if env_key in environ:
            values[f.name] = environ[env_key]
    return values


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
        if isinstance(converted[key], float) and key.endswith(("_s", "_gbps", "ratio", "tau", "speed")) and not converted[key] >= 0:
            raise ConfigError(f"{source}: {where} {key} must be >= 0, got {converted[key]}")
        _check_value(converted[key], section, key, where, source)
    missing = [name for name, f in known.items() if name not in converted and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ConfigError(f"{source}: {where} is missing required key(s): {', '.join(missing)}")
    return cls(**converted)


def _check_value(value: Any, section: str, key: str, where: str, source: str) -> None:
    minimum_s = _MIN_SECONDS.get((section, key))
    if minimum_s is not None and not (math.isfinite(value) and value >= minimum_s):
        raise ConfigError(f"{source}: {where} {key} = {value} is not valid: finite seconds >= {minimum_s:g}")
    if isinstance(value, float) and math.isinf(value) and (section, key) not in _INFINITE_OK:
        raise ConfigError(f"{source}: {where} {key} = {value} is not valid: a finite number")
    minimum = _MIN_INT.get((section, key))
    if minimum is not None and value < minimum:
        raise ConfigError(f"{source}: {where} {key} = {value} is not valid: an integer >= {minimum}")


def _convert(value: Any, annotation: Any, what: str, source: str) -> Any:
    """TOML (or environment string) value -> the field's type, with an error naming the key."""
    named = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    kind = named.replace(" ", "")
    optional = kind.endswith("|None")
    base = kind.removesuffix("|None")
    try:
        if optional and (value is None or value == ""):
            return None
        if base == "float":
            if isinstance(value, bool):
                raise ValueError("a boolean")
            return float(value)
        if base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError("not an integer")
            return int(value)
        if base == "bool":
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
                return value.lower() in ("1", "true", "yes")
            if not isinstance(value, bool):
                raise ValueError(type(value).__name__)
            return value
        if base == "str":
            if not isinstance(value, str):
                raise ValueError(type(value).__name__)
            return value
        if base == "tuple[str,...]":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
                raise ValueError("expected a list of strings")
            return tuple(i.strip() for i in items if i.strip())
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {what} must be {base}, got {value!r} ({error})") from None
    return value
