"""``SlurmCliBackend``: the scheduling loop's :class:`~asrpt.loop.ClusterBackend` on a real
Slurm, through squeue/sinfo/scontrol (and sacct when slurmdbd runs).

Reading (:meth:`SlurmCliBackend.snapshot`): one ``squeue --json`` and one per-node query per
cycle, turned into a :class:`~asrpt.core.model.ClusterSnapshot`:

* **partitions** are asrpt's: nodes of one accelerator type and one interconnect. A node
  belongs to the first configured partition (:attr:`SlurmBackendConfig.partitions`) whose
  Slurm partition of the same name contains it; a node in none gets a partition named after
  its first Slurm partition in which every accelerator node has the same GRES (default
  bandwidths). Slurm partitions that span several types (a default ``gpu`` partition) are
  umbrellas: a job sent there may run on every asrpt partition that shares nodes with it.
* **nodes**: accelerators = the node's accelerator GRES (:attr:`~SlurmBackendConfig.accelerator_gres`,
  e.g. ``gpu:a100:8`` or ``npu:8``); free = configured minus ``gres_used``; 0 when the node
  is down, drained, failing, not responding or of unknown state.
* **pending jobs** (those Slurm could start: not held by a user or admin, no
  BeginTime/Dependency/... reason, see :data:`DEFAULT_INELIGIBLE_REASONS`): accelerators =
  GRES per node x nodes, or ``--gpus``, or per task x tasks; allocation shape = what cons_tres
  allocates for that request (per node x nodes: fixed; ``--gpus`` alone or per task: spread;
  see ``_request``), so asrpt pins only node lists Slurm accepts; allowed partitions = asrpt
  partitions that share nodes with the job's Slurm partitions and have the requested GRES
  (name and type); allowed accelerators = theirs. Jobs without an accelerator GRES are left
  to Slurm. The layout is data parallel unless the job's ``--comment`` carries a hint
  token ``asrpt:dp=2,pp=2,tp=2,mb=8,class=bert`` (any subset; the product must equal the
  accelerators); the workload class is the hint's ``class`` or the configured default.
  ``group`` is ``user/name``, Slurm's proxy for a recurring job.
* **running jobs**: placement from the per-node allocated GRES (``gres_detail``);
  ``iteration_time_s`` from the callable given to the constructor.

* **first look**: job_submit.lua (``FIRST_LOOK_S``) gives a new batch job that Slurm could
  split across nodes a begin time a bounded time ahead and ``asrpt-look`` in its
  AdminComment, so that Slurm does not start a communication-heavy job split before a cycle
  has seen it. Such a job is in the snapshot although its reason is BeginTime; the first
  apply that sees it removes the tag and writes ``StartTime=now`` with its other changes (a
  hold, if the decision holds it, comes first). A daemon that is down clears nothing and
  Slurm starts the job at the begin time: nothing waits longer than the plugin's bound.
* **job arrays**: each task is a job, ``<array>_<task>`` (the parser lists the tasks of the
  array's one pending record, ``1_[2-9]``, one by one). Writes go to the task id: Slurm then
  splits that task into a record of its own, as it does anyway when a task starts. A write
  to the whole array would give every task one priority, one node list and one ETA, but
  asrpt's order may put other jobs between two tasks (a short job that arrives later), pins
  and holds are per task, and each task has its own ETA. A task asrpt has nothing to write
  to stays in the shared record.

A poll that is not ok raises :class:`~asrpt.exceptions.SlurmUnreachable` or
:class:`~asrpt.exceptions.SlurmOutputMalformed`; there is never a half snapshot.

Writing (:meth:`SlurmCliBackend.apply`) compares what the decision wants with what Slurm
showed in the last snapshot (patched with this backend's own successful writes), and writes
only the difference, one ``scontrol update`` per job carrying all its changed fields:

* **priority**: Slurm's priority/basic numbers new jobs 4294901759, 4294901758, ... in
  submit order, and keeps a priority set by scontrol. asrpt writes the decision's order,
  its starts first (so that nothing outranks a start Slurm should make at once; the
  simulator's Slurm model, :mod:`asrpt.sim.slurmctld`, assumes the same), *above* that range (``priority_floor`` .. ``priority_ceiling``, at most 4294967293, the
  largest value Slurm accepts), so a job submitted between two cycles ranks below every job
  asrpt has ordered until the next cycle orders it too. Values are spaced ``priority_gap``
  apart and a new order keeps the longest run of jobs whose current values are already in
  order, so one new job costs one write. Beyond ``ordered_limit`` jobs all get
  ``priority_floor`` (batched, several jobs per call).
* **ReqNodeList** only for the decision's starts, and only when every node is in one of the
  job's Slurm partitions, carries the requested GRES name/type with enough of it, and the
  node count fits the request (Slurm accepts an impossible list with exit 0 and then holds the
  job with Reason=BadConstraints). A user's own ``-w`` list is never touched; a pin asrpt set
  is cleared when the job is no longer a start, and a job asrpt pinned that still ended in
  BadConstraints is repaired (list cleared, released, priority set again).
* **holds**: ``scontrol hold`` for the decision's holds, ``release`` (then the priority again,
  since a release resets it) when a job asrpt held is no longer among them. Jobs held by
  their user or by an admin are never released.
* **AdminComment** (admin-only; the job owner cannot change it) ends with asrpt's part,
  ``asrpt[held,pin]: <text>``: the flags record what asrpt owns (written *before* the hold
  and in the same call as the pin), so a restarted daemon recognises its holds and pins
  from Slurm alone and never leaves a job stuck. Any other text before it (a submit
  plugin's tag) is kept. The text comes from ``admin_comments=`` or the constructor's
  ``admin_comment`` callable; with neither, asrpt leaves existing text alone.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain

from asrpt.comment_hints import parse_comment_hints
from asrpt.core.model import (
    SPREAD,
    ClusterSnapshot,
    Decision,
    Job,
    Node,
    ParallelConfig,
    Partition,
    Placement,
    RequestShape,
    RunningJob,
)
from asrpt.exceptions import ConfigError, SlurmOutputMalformed, SlurmUnreachable
from asrpt.slurm import commands
from asrpt.slurm.parsing import (
    compress_nodelist,
    expand_nodelist,
    failed_job_ids,
    job_id_order_key,
    parse_jobcomp_lines,
    parse_nodes_json,
    parse_sacct,
    parse_squeue_json,
    parse_version,
)
from asrpt.slurm.records import FinishedJob, GresItem, SlurmJob, SlurmNode
from asrpt.slurm.runner import Outcome, RunResult, SlurmRunner

__all__ = [
    "SlurmBackendConfig",
    "SlurmCliBackend",
    "ApplyReport",
    "IterationTimeFn",
    "AdminCommentFn",
    "DEFAULT_INELIGIBLE_REASONS",
    "PRIORITY_AUTO_MAX",
    "PRIORITY_MAX",
    "assign_priorities",
    "parse_hints",
    "JobHints",
    "split_admin_comment",
    "format_admin_comment",
]

log = logging.getLogger(__name__)

#: Highest priority priority/basic gives a new job (the next ones count down from it).
PRIORITY_AUTO_MAX = 4294901759
#: Highest priority ``scontrol update`` accepts (4294967294 is "Invalid Priority value").
PRIORITY_MAX = 4294967293

#: Pending reasons of jobs Slurm will not start, whatever their priority, until someone acts
#: (a release, a dependency, a begin time, a fixed partition): left out of the snapshot.
#: Waiting for resources (Resources, Priority, ReqNodeNotAvail, NodeDown) is not among them.
DEFAULT_INELIGIBLE_REASONS: tuple[str, ...] = (
    "JobHeldUser", "JobHeldAdmin", "BeginTime", "Dependency", "DependencyNeverSatisfied",
    "BadConstraints", "PartitionDown", "PartitionInactive", "PartitionConfig",
    "PartitionTimeLimit", "PartitionNodeLimit", "InvalidAccount", "InvalidQOS",
)

IterationTimeFn = Callable[[Job, tuple[str, ...], Partition], float]
AdminCommentFn = Callable[[str, Decision], "str | None"]

#: The word job_submit.lua puts in the AdminComment of a job it made wait for a first look.
FIRST_LOOK_TAG = "asrpt-look"

#: Jobs per multi-job ``scontrol update`` (keeps argv short).
_BATCH = 100


def _constant_iteration_time(job: Job, worker_nodes: tuple[str, ...], partition: Partition) -> float:
    """Placeholder until the daemon passes the speed model's alpha: 1 s per iteration."""
    return 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmBackendConfig:
    """How to reach Slurm and how to read/write it; the ``[slurm]`` table of asrpt.toml
    (same key names; ``partitions`` are its ``[[slurm.partitions]]``)."""

    #: slurm.conf exported as SLURM_CONF to every command; None inherits the environment's.
    slurm_conf: str | None = None
    #: Directory of squeue/sinfo/scontrol/sacct; None or "" = PATH.
    bin_dir: str | None = None
    #: Seconds before a command counts as unreachable (22.05 clients take ~9 s to give up).
    timeout_s: float = 15.0
    #: Retries of 24.11's "Resource temporarily unavailable".
    retries: int = 3
    #: asrpt partitions (name = the Slurm partition holding the nodes; accelerator = the
    #: speed-table type; bandwidths). Nodes in none of them get automatic ones.
    partitions: tuple[Partition, ...] = ()
    #: GRES names that are accelerators.
    accelerator_gres: tuple[str, ...] = ("gpu", "npu")
    #: Workload class (speed-table key) of a job whose comment names none.
    default_workload_class: str = "resnet50"
    #: The jobcomp/filetxt log (JobCompLoc); None = not used.
    jobcomp_log: str | None = None
    #: Also ask accounting (sacct; needs slurmdbd) for finished jobs.
    use_sacct: bool = False
    #: Lowest priority asrpt writes (jobs past ``ordered_limit`` get it).
    priority_floor: int = PRIORITY_AUTO_MAX + 41
    #: Highest priority asrpt writes.
    priority_ceiling: int = PRIORITY_MAX
    #: Preferred distance between consecutive priorities.
    priority_gap: int = 64
    #: Pending jobs that get distinct priorities, most urgent first.
    ordered_limit: int = 1000
    #: Pending reasons that keep a job out of the snapshot.
    ineligible_reasons: tuple[str, ...] = DEFAULT_INELIGIBLE_REASONS
    #: Longest AdminComment asrpt writes (its text is cut to fit).
    admin_comment_max_chars: int = 400

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError(f"slurm.timeout_s must be positive, got {self.timeout_s}")
        if self.retries < 0:
            raise ConfigError(f"slurm.retries must be >= 0, got {self.retries}")
        if not PRIORITY_AUTO_MAX < self.priority_floor < self.priority_ceiling <= PRIORITY_MAX:
            raise ConfigError(
                f"slurm priorities must satisfy {PRIORITY_AUTO_MAX} < priority_floor < "
                f"priority_ceiling <= {PRIORITY_MAX} (above priority/basic's automatic range, "
                f"within what scontrol accepts); got {self.priority_floor}..{self.priority_ceiling}"
            )
        if self.priority_gap < 1:
            raise ConfigError(f"slurm.priority_gap must be >= 1, got {self.priority_gap}")
        room = self.priority_ceiling - self.priority_floor - 1
        if not 1 <= self.ordered_limit <= room:
            raise ConfigError(f"slurm.ordered_limit must be in 1..{room} (the priority band), got {self.ordered_limit}")
        if not self.accelerator_gres:
            raise ConfigError("slurm.accelerator_gres must name at least one GRES (e.g. gpu)")
        if not self.default_workload_class:
            raise ConfigError("slurm.default_workload_class must not be empty")
        names = [p.name for p in self.partitions]
        if len(set(names)) != len(names):
            raise ConfigError(f"slurm.partitions: duplicate names in {names}")
        if self.admin_comment_max_chars < 40:
            raise ConfigError("slurm.admin_comment_max_chars must be >= 40")


# -- comment hints and asrpt's AdminComment part (pure) ------------------------------------------



@dataclass(frozen=True, slots=True)
class JobHints:
    """What a job's ``--comment`` says about itself (``asrpt:dp=2,tp=4,class=bert``)."""

    parallel: Mapping[str, int] = field(default_factory=dict)
    workload_class: str | None = None

    def parallel_for(self, accelerators: int) -> ParallelConfig:
        """The hinted layout if it fits ``accelerators`` workers, else data parallel.

        A missing ``dp`` is derived (accelerators / (pp x tp)) when that divides."""
        values = dict(self.parallel)
        if not values:
            return ParallelConfig.data_parallel(accelerators)
        pp, tp = values.get("pipeline", 1), values.get("tensor", 1)
        if "data" not in values and accelerators % (pp * tp) == 0:
            values["data"] = accelerators // (pp * tp)
        try:
            config = ParallelConfig(**values)
        except ValueError:
            return ParallelConfig.data_parallel(accelerators)
        if config.workers != accelerators:
            return ParallelConfig(data=accelerators, micro_batches=config.micro_batches)
        return config


def parse_hints(comment: str) -> JobHints:
    """Hints from a job comment, by the wrapper's rule (:mod:`asrpt.comment_hints`): bad values
    and unknown keys are dropped (the comment is the user's free text; the wrapper warned)."""
    hints = parse_comment_hints(comment)
    return JobHints(hints.parallel, hints.workload_class)


_OWN_RE = re.compile(r"(?:^|\s)asrpt(?:\[(?P<flags>[a-z,]*)\])?:(?:\s(?P<text>.*))?$", re.DOTALL)


def split_admin_comment(admin_comment: str) -> tuple[str, frozenset[str], str | None]:
    """(other text, asrpt's flags, asrpt's text or None when asrpt has no part).

    asrpt's part is always last: ``<other> asrpt[held,pin]: <text>``."""
    text = admin_comment or ""
    match = _OWN_RE.search(text)
    if not match:
        return text.strip(), frozenset(), None
    flags = frozenset(f for f in (match.group("flags") or "").split(",") if f)
    return text[: match.start()].strip(), flags, (match.group("text") or "").strip()


def format_admin_comment(other: str, flags: Iterable[str], text: str | None, max_chars: int = 400) -> str:
    """The AdminComment: ``other`` text, then asrpt's part ``asrpt[flags]: text``; asrpt's
    part is dropped when it has no flag and no text. Beyond ``max_chars`` asrpt's text and
    then ``other`` are shortened; the marker and flags are never cut."""
    flag_set = sorted(set(flags))
    own_text = " ".join((text or "").split())
    other = " ".join((other or "").split())
    if not flag_set and not own_text:
        return other
    marker = "asrpt" + (f"[{','.join(flag_set)}]" if flag_set else "") + ":"
    room = max_chars - len(marker) - 1
    if len(own_text) > room:
        own_text = own_text[: max(0, room - 3)] + "..."
    own = f"{marker} {own_text}" if own_text else marker
    if not other:
        return own
    room = max_chars - len(own) - 1
    if room < 4:
        return own
    if len(other) > room:
        other = other[: room - 3] + "..."
    return f"{other} {own}"


# -- priorities (pure) ----------------------------------------------------------------------------


def _longest_decreasing(indices: Sequence[int], values: Sequence[int]) -> list[int]:
    """Indices (subsequence of ``indices``) of a longest strictly decreasing run of values."""
    tails: list[int] = []  # negated values, increasing
    tail_idx: list[int] = []
    parent: dict[int, int | None] = {}
    for i in indices:
        key = -values[i]
        pos = bisect.bisect_left(tails, key)
        parent[i] = tail_idx[pos - 1] if pos > 0 else None
        if pos == len(tails):
            tails.append(key)
            tail_idx.append(i)
        else:
            tails[pos] = key
            tail_idx[pos] = i
    out: list[int] = []
    node = tail_idx[-1] if tail_idx else None
    while node is not None:
        out.append(node)
        node = parent[node]
    return out[::-1]


def _spread(k: int, upper_excl: int, lower_excl: int) -> list[int] | None:
    """k strictly decreasing integers strictly between the bounds, evenly spaced."""
    width = upper_excl - lower_excl
    if width < k + 1:
        return None
    return [upper_excl - ((t + 1) * width) // (k + 1) for t in range(k)]


def assign_priorities(
    order: Sequence[str],
    current: Mapping[str, int | None],
    *,
    floor: int,
    ceiling: int,
    gap: int,
    ordered_limit: int,
) -> dict[str, int]:
    """Slurm priorities for ``order`` (most urgent first) that change as few jobs as possible.

    The first ``ordered_limit`` jobs get distinct values in (floor, ceiling], strictly
    decreasing; the rest get ``floor``. Jobs whose ``current`` value already lies in the band
    and in the right relative order keep it (a longest such subsequence); the others are put
    ``gap`` apart next to their kept neighbours or spread evenly between them. Only if a
    stretch has no room left is the whole head renumbered, centred in the band.
    """
    head = list(order[:ordered_limit])
    result = {job_id: floor for job_id in order[ordered_limit:]}
    n = len(head)
    if n == 0:
        return result
    values = [current.get(job_id) for job_id in head]
    valid = [i for i, v in enumerate(values) if v is not None and floor < v <= ceiling]
    keep = _longest_decreasing(valid, values)  # type: ignore[arg-type]
    assigned: dict[int, int] = {i: values[i] for i in keep}  # type: ignore[misc]
    ok = bool(keep)
    if ok:
        prev_i, prev_v = -1, None
        for i, v in [(k, values[k]) for k in keep] + [(n, None)]:
            k = i - prev_i - 1
            if k:
                if prev_v is None:  # above the first kept job
                    fill = [v + gap * (k - t) for t in range(k)] if v + gap * k <= ceiling else _spread(k, ceiling + 1, v)
                elif v is None:  # below the last kept job
                    fill = [prev_v - gap * (t + 1) for t in range(k)] if prev_v - gap * k > floor else _spread(k, prev_v, floor)
                else:
                    fill = _spread(k, prev_v, v)
                if fill is None:
                    ok = False
                    break
                for t, value in enumerate(fill):
                    assigned[prev_i + 1 + t] = value
            prev_i, prev_v = i, v
    if not ok:
        step = min(gap, (ceiling - floor) // (n + 1))
        if step < 1:
            raise ValueError(f"{n} ordered jobs do not fit between priorities {floor} and {ceiling}")
        span = step * (n - 1)
        top = min(ceiling, (floor + ceiling + span) // 2 + 1)
        assigned = {i: top - step * i for i in range(n)}
    result.update({head[i]: assigned[i] for i in range(n)})
    return result


# -- the cluster layout (which node is in which asrpt partition) -----------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    partitions: tuple[Partition, ...]
    #: accelerator node -> asrpt partition name
    node_partition: Mapping[str, str]
    #: accelerator node -> its accelerator GRES (configured)
    node_gres: Mapping[str, GresItem]
    #: Slurm partition -> its accelerator nodes
    members: Mapping[str, frozenset[str]]

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)

    def targets(self, slurm_partitions: Iterable[str], request: GresItem, per_node: int = 1) -> tuple[str, ...]:
        """asrpt partitions a job may use: sharing nodes with its Slurm partitions and
        carrying the requested GRES (name, and type when given), ``per_node`` of it at least."""
        names: set[str] = set()
        for sp in slurm_partitions:
            for node in self.members.get(sp, ()):
                gres = self.node_gres[node]
                if gres.matches(request.name, request.type) and gres.count >= per_node:
                    names.add(self.node_partition[node])
        return tuple(p.name for p in self.partitions if p.name in names)


def _build_layout(nodes: Sequence[SlurmNode], config: SlurmBackendConfig) -> _Layout:
    accel_names = {g.lower() for g in config.accelerator_gres}
    node_gres: dict[str, GresItem] = {}
    for node in nodes:
        items = [g for g in node.gres if g.name.lower() in accel_names and g.count > 0]
        if items:
            if len({(g.name, g.type) for g in items}) > 1:
                log.warning("node %s has several accelerator GRES %s; asrpt uses %s only",
                            node.name, ", ".join(map(str, items)), items[0])
            node_gres[node.name] = items[0]
    members: dict[str, set[str]] = {}
    for node in nodes:
        if node.name in node_gres:
            for sp in node.partitions:
                members.setdefault(sp, set()).add(node.name)
    configured = {p.name: p for p in config.partitions}
    auto: dict[str, Partition] = {}
    node_partition: dict[str, str] = {}
    for node in nodes:
        gres = node_gres.get(node.name)
        if gres is None:
            continue
        chosen = next((p.name for p in config.partitions if p.name in node.partitions), None)
        if chosen is None:
            key = (gres.name.lower(), (gres.type or "").lower())
            homogeneous = [
                sp for sp in node.partitions
                if sp not in configured and all(
                    (node_gres[m].name.lower(), (node_gres[m].type or "").lower()) == key for m in members.get(sp, ())
                )
            ]
            chosen = homogeneous[0] if homogeneous else f"{node.partitions[0] if node.partitions else 'nopartition'}-{gres.type or gres.name}"
            if chosen not in auto:
                auto[chosen] = Partition(name=chosen, accelerator=gres.type or gres.name)
        node_partition[node.name] = chosen
    used = set(node_partition.values())
    partitions = tuple(p for p in config.partitions if p.name in used) + tuple(auto[n] for n in auto)
    return _Layout(partitions, node_partition, node_gres, {k: frozenset(v) for k, v in members.items()})


# -- apply bookkeeping ---------------------------------------------------------------------------


@dataclass(slots=True)
class ApplyReport:
    """What one :meth:`SlurmCliBackend.apply` wrote (for logs, metrics and tests)."""

    priorities: int = 0
    pins: int = 0
    pins_cleared: int = 0
    holds: int = 0
    releases: int = 0
    #: Running jobs requeued for a preemptive policy (``scontrol requeue``).
    requeues: int = 0
    admin_comments: int = 0
    #: scontrol calls made.
    calls: int = 0
    #: Rejected writes, as "`argv` (exit 1, ...): stderr".
    failures: list[str] = field(default_factory=list)
    #: Decided starts that were not pinned, with the reason.
    pins_skipped: dict[str, str] = field(default_factory=dict)
    #: Jobs made eligible at the first look (job_submit.lua's begin time cleared).
    first_looks: int = 0


@dataclass(slots=True)
class _Want:
    """The state apply wants for one job, and what it takes to get there."""

    job: SlurmJob
    other: str
    flags: set[str]
    text: str | None
    priority: int | None = None
    req_nodes: str | None = None  # None = leave as is
    hold: bool = False
    release: bool = False
    #: Waiting for asrpt's first look (job_submit.lua's begin time): make it eligible now.
    first_look: bool = False


class SlurmCliBackend:
    """A :class:`~asrpt.loop.ClusterBackend` on Slurm's command-line tools (see the module doc).

    Parameters
    ----------
    config
        What to run and how to map the cluster.
    runner
        The command runner (default: one built from ``config``); tests pass one with fake
        binaries or count its calls.
    iteration_time_s
        ``f(job, worker_nodes, partition) -> seconds per iteration`` for running jobs'
        placements; the daemon passes the speed model's. Default: 1 s (a placeholder).
    admin_comment
        ``f(job_id, decision) -> text or None``: asrpt's AdminComment text per job (e.g. the
        ETA); called by :meth:`apply` for every pending and running job of the snapshot.
    """

    def __init__(
        self,
        config: SlurmBackendConfig,
        *,
        runner: SlurmRunner | None = None,
        iteration_time_s: IterationTimeFn | None = None,
        admin_comment: AdminCommentFn | None = None,
    ) -> None:
        self.config = config
        self.runner = runner or SlurmRunner(
            slurm_conf=config.slurm_conf, bin_dir=config.bin_dir, timeout_s=config.timeout_s, retries=config.retries
        )
        self._iteration_time_s = iteration_time_s or _constant_iteration_time
        self._admin_comment = admin_comment
        self._ineligible = frozenset(config.ineligible_reasons)
        self._version: tuple[int, int, int] | None = None
        self._jobs: dict[str, SlurmJob] | None = None
        self._nodes: tuple[SlurmNode, ...] = ()
        self._layout: _Layout | None = None
        #: Jobs asrpt held (also recognised from the AdminComment flag after a restart).
        self._held: set[str] = set()
        #: What the last :meth:`apply` wrote.
        self.last_apply = ApplyReport()
        self._jobcomp_offset = 0
        self._jobcomp_inode: int | None = None
        self._jobcomp_since = math.inf
        self._jobcomp_cache: list[FinishedJob] = []

    # -- reading -----------------------------------------------------------------------------------

    @property
    def slurm_version(self) -> tuple[int, int, int] | None:
        """Slurm's version, known after the first snapshot."""
        return self._version

    @property
    def nodes(self) -> tuple[SlurmNode, ...]:
        """Every node of the last snapshot as Slurm showed it."""
        return self._nodes

    @property
    def jobs(self) -> Mapping[str, SlurmJob]:
        """Every job of the last snapshot as Slurm showed it (including jobs left out of the
        ClusterSnapshot: held, CPU-only, finished): for ingesting submission records."""
        return dict(self._jobs or {})

    def _check(self, result: RunResult) -> RunResult:
        result.raise_for_outcome()
        return result

    def _detect_version(self) -> tuple[int, int, int]:
        result = self._check(self.runner.run(commands.version()))
        return parse_version(result.stdout)

    def poll(self) -> tuple[tuple[SlurmJob, ...], tuple[SlurmNode, ...]]:
        """One ``squeue --json`` and one node query; raises unless both are ok."""
        result = self._check(self.runner.run(commands.squeue_jobs()))
        version, jobs = parse_squeue_json(result.stdout)
        if self._version is None:
            self._version = version or self._detect_version()
        result = self._check(self.runner.run(commands.nodes_query(self._version)))
        nodes = parse_nodes_json(result.stdout)
        if not nodes:
            raise SlurmOutputMalformed(f"node query `{' '.join(result.argv)}` listed no nodes")
        return jobs, nodes

    def snapshot(self) -> ClusterSnapshot:
        jobs, nodes = self.poll()
        layout = _build_layout(nodes, self.config)
        job_map = {j.job_id: j for j in jobs}
        pending: list[Job] = []
        running: list[RunningJob] = []
        for sj in jobs:
            if sj.is_pending:
                job = self._pending_job(sj, layout)
                if job is not None:
                    pending.append(job)
            elif sj.holds_resources and sj.nodes:
                run = self._running_job(sj, layout)
                if run is not None:
                    running.append(run)
        core_nodes = []
        for node in nodes:
            gres = layout.node_gres.get(node.name)
            if gres is None:
                continue
            used = sum(g.count for g in node.gres_used if g.matches(gres.name, gres.type))
            free = max(0, min(gres.count, gres.count - used)) if node.available else 0
            partition = layout.partition(layout.node_partition[node.name])
            core_nodes.append(Node(
                name=node.name, partition=partition.name, accelerator=partition.accelerator,
                accelerators_total=gres.count, accelerators_free=free,
            ))
        # Only now, when everything parsed: a failed poll leaves the previous view in place.
        self._jobs, self._nodes, self._layout = job_map, nodes, layout
        self._held = {j for j in self._held if j in job_map and job_map[j].is_pending}
        pending.sort(key=lambda j: (j.submit_time_s, job_id_order_key(j.job_id)))
        running.sort(key=lambda r: job_id_order_key(r.job.job_id))
        return ClusterSnapshot(partitions=layout.partitions, nodes=tuple(core_nodes),
                               pending=tuple(pending), running=tuple(running))

    def _request(self, sj: SlurmJob) -> tuple[GresItem, int, bool, RequestShape] | None:
        """(requested accelerator GRES, total count, whether it is per node, allocation shape)
        or None.

        The shape is what cons_tres will allocate, so the only one asrpt may pin: GRES per
        node x node count (``-N n --gres=gpu:k``, ``--gpus-per-node``) is fixed ``n x k``;
        ``--gpus=g`` with ``--gpus-per-node=k`` is fixed ``g/k x k``; ``--gpus`` alone or per
        task is spread (any nodes).
        """
        accel = {g.lower() for g in self.config.accelerator_gres}

        def first(items: Sequence[GresItem]) -> GresItem | None:
            return next((i for i in items if i.name.lower() in accel and i.count > 0), None)

        per_node, per_job = first(sj.gres_per_node), first(sj.gres_per_job)
        if per_node is not None and per_job is not None:
            if per_job.count % per_node.count == 0:
                nodes = per_job.count // per_node.count
                return per_node, per_job.count, True, RequestShape(nodes=nodes, per_node=per_node.count)
            return per_job, per_job.count, False, SPREAD
        if per_node is not None:
            return per_node, per_node.count * sj.node_count, True, RequestShape(nodes=sj.node_count, per_node=per_node.count)
        if per_job is not None:
            return per_job, per_job.count, False, SPREAD
        per_task = first(sj.gres_per_task)
        if per_task is not None:
            return per_task, per_task.count * sj.tasks, False, SPREAD
        return None

    def _owned_hold(self, sj: SlurmJob) -> bool:
        """Held by asrpt: its own hold, or a node list asrpt set that Slurm found impossible."""
        if not sj.is_held:
            return False
        flags = split_admin_comment(sj.admin_comment)[1]
        if sj.job_id in self._held or "held" in flags:
            return True
        return sj.reason == "BadConstraints" and "pin" in flags and bool(sj.required_nodes)

    def _make_job(self, sj: SlurmJob, layout: _Layout, request: GresItem, count: int,
                  partitions: Sequence[str], per_node: bool = False, shape: RequestShape = SPREAD) -> Job | None:
        targets = layout.targets(partitions, request, request.count if per_node else 1)
        if not targets:
            return None
        hints = parse_hints(sj.comment)
        return Job(
            job_id=sj.job_id,
            submit_time_s=sj.submit_time_s,
            parallel=hints.parallel_for(count),
            workload_class=hints.workload_class or self.config.default_workload_class,
            user=sj.user,
            group=f"{sj.user}/{sj.name}" if sj.user or sj.name else "",
            allowed_partitions=targets,
            allowed_accelerators=tuple(sorted({layout.partition(t).accelerator for t in targets})),
            time_limit_s=sj.time_limit_s,
            request_shape=shape,
            requeueable=sj.requeue,
        )

    @staticmethod
    def _first_look(sj: SlurmJob) -> bool:
        """Waiting only for asrpt's first look: job_submit.lua's begin time and tag."""
        return (sj.is_pending and sj.reason.split(",", 1)[0].strip() == "BeginTime"
                and FIRST_LOOK_TAG in split_admin_comment(sj.admin_comment)[0].split())

    def _pending_job(self, sj: SlurmJob, layout: _Layout) -> Job | None:
        reason = sj.reason.split(",", 1)[0].strip()
        if sj.is_held and not self._owned_hold(sj):
            return None  # held by its user or an admin; asrpt's own holds stay visible
        if reason in self._ineligible and not sj.is_held and not self._first_look(sj):
            return None  # Slurm would not start it now
        request = self._request(sj)
        if request is None:
            return None
        return self._make_job(sj, layout, request[0], request[1], sj.partitions, request[2], request[3])

    def _running_job(self, sj: SlurmJob, layout: _Layout) -> RunningJob | None:
        request = self._request(sj)
        if request is None:
            return None
        item, total, per_node, shape = request
        workers: list[str] = []
        if sj.gres_allocated:
            for node, alloc in zip(sj.nodes, sj.gres_allocated):
                workers += [node] * sum(g.count for g in alloc if g.matches(item.name, None))
        else:  # no per-node detail: the request spread over the allocated nodes
            share = [item.count if per_node else total // len(sj.nodes)] * len(sj.nodes)
            if not per_node:
                for i in range(total - sum(share)):
                    share[i % len(share)] += 1
            for node, n in zip(sj.nodes, share):
                workers += [node] * n
        workers = [w for w in workers if w in layout.node_partition]
        if not workers:
            return None
        counts: dict[str, int] = {}
        for w in workers:
            counts[layout.node_partition[w]] = counts.get(layout.node_partition[w], 0) + 1
        partition = layout.partition(max(counts, key=lambda p: counts[p]))
        # It keeps the placement Slurm gave it; the request's shape only if that is what it holds.
        if shape.fixed and len(workers) != total:
            shape = SPREAD
        job = self._make_job(sj, layout, item, len(workers), sj.partitions or (partition.name,), shape=shape)
        if job is None:
            job = Job(job_id=sj.job_id, submit_time_s=sj.submit_time_s,
                      parallel=ParallelConfig.data_parallel(len(workers)),
                      workload_class=self.config.default_workload_class, user=sj.user,
                      group=f"{sj.user}/{sj.name}", time_limit_s=sj.time_limit_s)
        worker_nodes = tuple(workers)
        placement = Placement(
            job_id=sj.job_id, partition=partition.name, worker_nodes=worker_nodes,
            iteration_time_s=float(self._iteration_time_s(job, worker_nodes, partition)),
        )
        return RunningJob(job=job, placement=placement, start_time_s=sj.start_time_s or sj.submit_time_s)

    # -- writing -----------------------------------------------------------------------------------

    def _pin_for(self, sj: SlurmJob, placement: Placement) -> tuple[str | None, str]:
        """(ReqNodeList for a decided start, or None with the reason it cannot be pinned)."""
        layout = self._layout
        assert layout is not None
        request = self._request(sj)
        if request is None:
            return None, "requests no accelerator GRES"
        item, _total, per_node, _shape = request
        nodes = list(dict.fromkeys(placement.worker_nodes))
        if not nodes:
            return None, "empty placement"
        common = [sp for sp in sj.partitions if all(n in layout.members.get(sp, ()) for n in nodes)]
        if not common:
            return None, f"nodes {','.join(nodes)} are not all in one of its partitions {','.join(sj.partitions)}"
        for node in nodes:
            gres = layout.node_gres.get(node)
            if gres is None or not gres.matches(item.name, item.type):
                return None, f"node {node} has no {item.name}{':' + item.type if item.type else ''}"
            need = item.count if per_node else placement.node_counts.get(node, 0)
            if need > gres.count:
                return None, f"node {node} has {gres.count} {item.name}, the job needs {need} per node"
        if per_node and len(nodes) > sj.node_count:
            return None, f"{len(nodes)} nodes for a job of {sj.node_count} node(s)"
        return compress_nodelist(nodes), ""

    def _texts(self, decision: Decision, admin_comments: Mapping[str, str] | None,
               jobs: Iterable[SlurmJob]) -> dict[str, str | None] | None:
        if admin_comments is not None:
            return {j.job_id: admin_comments.get(j.job_id) for j in jobs}
        if self._admin_comment is not None:
            return {j.job_id: self._admin_comment(j.job_id, decision) for j in jobs}
        return None

    def apply(self, decision: Decision, *, admin_comments: Mapping[str, str] | None = None) -> None:
        """Write what ``decision`` changes compared with what Slurm showed (see the module doc);
        what was written is in :attr:`last_apply`.

        ``admin_comments`` (job id -> text) overrides the constructor's ``admin_comment``
        callable for this call; a job it leaves out gets no asrpt text.

        Raises :class:`SlurmUnreachable` (after keeping what was already written) when
        slurmctld stops answering midway; rejected single writes are logged and reported.
        """
        if self._jobs is None:
            self.snapshot()
        assert self._jobs is not None
        cfg = self.config
        report = self.last_apply = ApplyReport()
        observed = self._jobs
        pending = {jid: j for jid, j in observed.items() if j.is_pending}
        active = [j for j in observed.values() if j.is_pending or j.holds_resources]
        texts = self._texts(decision, admin_comments, active)

        wants: dict[str, _Want] = {}
        for sj in active:
            other, flags, text = split_admin_comment(sj.admin_comment)
            new_text = text if texts is None else texts.get(sj.job_id)
            if not sj.is_pending and new_text != text:
                flags = frozenset()  # a started job's comment is rewritten anyway: drop stale flags
            # The plugin's first-look word goes with asrpt's next write (a job that started at
            # its begin time while asrptd was down keeps it until then).
            other = " ".join(w for w in other.split() if w != FIRST_LOOK_TAG)
            wants[sj.job_id] = _Want(sj, other, set(flags), new_text)

        held_wanted = {j for j in decision.holds if j in pending}
        starts = {p.job_id: p for p in decision.starts if p.job_id in pending}
        for jid, sj in pending.items():
            want = wants[jid]
            if self._first_look(sj):
                want.first_look = True
            own_pin = "pin" in want.flags and bool(sj.required_nodes)
            bad_pin = sj.reason == "BadConstraints" and own_pin
            owned_hold = self._owned_hold(sj)
            if sj.is_held and not owned_hold:
                continue  # held by its user or an admin: only the text may change
            if not sj.is_held:
                want.flags.discard("held")
            if not own_pin:
                want.flags.discard("pin")
            if jid in held_wanted and not sj.is_held:
                want.hold = True
                want.flags.add("held")
            if owned_hold and (jid not in held_wanted or bad_pin):
                want.release = True  # the "held" flag goes once the release succeeded
            if sj.required_nodes and not own_pin:
                if jid in starts:
                    report.pins_skipped[jid] = "its user's own node list is kept"
                continue
            pin: str | None = None
            if jid in starts and jid not in held_wanted and not bad_pin:
                pin, why = self._pin_for(sj, starts[jid])
                if pin is None:
                    report.pins_skipped[jid] = why
                    log.warning("not pinning job %s: %s", jid, why, extra={"action": "pin_skipped", "job_id": jid})
            if pin is not None:
                if pin != compress_nodelist(sj.required_nodes):
                    want.req_nodes = pin
                want.flags.add("pin")
            elif own_pin:
                want.req_nodes = ""  # no longer a start (or held, or BadConstraints): unpin
                want.flags.discard("pin")

        # Priorities for the jobs that will be pending and not held after this apply: the
        # starts first (pinned, so that Slurm starts them at once), then the decision's order.
        order = [
            jid for jid in dict.fromkeys(chain(starts, decision.order))
            if jid in pending and jid not in held_wanted
            and (not pending[jid].is_held or wants[jid].release)
        ]
        current_prio = {
            jid: (None if pending[jid].is_held else pending[jid].priority) for jid in order
        }
        priorities = assign_priorities(
            order, current_prio, floor=cfg.priority_floor, ceiling=cfg.priority_ceiling,
            gap=cfg.priority_gap, ordered_limit=cfg.ordered_limit,
        )
        for jid, value in priorities.items():
            if value != current_prio[jid]:
                wants[jid].priority = value

        try:
            # Requeues first: the starts they make room for are pinned to the nodes they free.
            requeue = [jid for jid in dict.fromkeys(decision.preempts)
                       if jid in observed and observed[jid].holds_resources and observed[jid].requeue]
            report.requeues += len(self._run_batch(commands.requeue, requeue, report))
            self._write(wants, order, report)
        finally:
            if report.calls:
                log.info(
                    "applied: %d priorities, %d pins, %d pins cleared, %d holds, %d releases, "
                    "%d requeues, %d admin comments, %d first looks in %d scontrol calls (%d rejected)",
                    report.priorities, report.pins, report.pins_cleared, report.holds,
                    report.releases, report.requeues, report.admin_comments, report.first_looks, report.calls,
                    len(report.failures),
                    extra={"action": "apply"},
                )

    def _comment_for(self, want: _Want) -> str:
        current = self._jobs[want.job.job_id].admin_comment if self._jobs and want.job.job_id in self._jobs else want.job.admin_comment
        if not want.flags and not want.text and split_admin_comment(current)[2] is None and not want.first_look:
            return current  # asrpt has no part and adds none: leave others' text exactly as it is
        return format_admin_comment(want.other, want.flags, want.text, self.config.admin_comment_max_chars)

    def _run_write(self, argv: list[str], report: ApplyReport) -> RunResult:
        result = self.runner.run(argv)
        report.calls += 1
        if result.outcome is Outcome.UNREACHABLE:
            raise SlurmUnreachable(f"Slurm unreachable while applying: {result.evidence()}")
        if result.outcome is Outcome.MALFORMED:
            report.failures.append(result.evidence())
            log.warning("Slurm rejected %s", result.evidence(), extra={"action": "apply_rejected"})
        return result

    def _patch(self, job_id: str, **changes: object) -> None:
        assert self._jobs is not None
        if job_id in self._jobs:
            self._jobs[job_id] = replace(self._jobs[job_id], **changes)  # type: ignore[arg-type]

    def _write(self, wants: dict[str, _Want], order: Sequence[str], report: ApplyReport) -> None:
        # 1. Holds: asrpt's "held" flag first (a restarted daemon then knows the hold is its
        #    own), in the same call as clearing an asrpt pin; then the hold itself.
        to_hold: list[str] = []
        for jid, want in wants.items():
            if not want.hold:
                continue
            comment = self._comment_for(want)
            if not self._update(jid, want, report, admin_comment=comment, req_nodes=want.req_nodes):
                continue
            want.req_nodes = None
            to_hold.append(jid)
        for chunk in _chunks(to_hold):
            for jid in self._run_batch(commands.hold, chunk, report):
                self._held.add(jid)
                self._patch(jid, priority=0, reason="JobHeldAdmin")
                report.holds += 1

        # 2. Releases: fix the node list first (a BadConstraints job needs it), then release,
        #    then (step 3) drop the "held" flag and set the priority again, which the release
        #    reset to a default.
        to_release: list[str] = []
        for jid, want in wants.items():
            if not want.release:
                continue
            if want.req_nodes is not None:
                if not self._update(jid, want, report, admin_comment=self._comment_for(want), req_nodes=want.req_nodes):
                    continue
                want.req_nodes = None
            to_release.append(jid)
        for chunk in _chunks(to_release):
            for jid in self._run_batch(commands.release, chunk, report):
                self._held.discard(jid)
                wants[jid].flags.discard("held")
                self._patch(jid, priority=None, reason="None")
                report.releases += 1

        # 3. One update per job with everything that changed, most urgent first; priority-only
        #    writes of the same value (the tail beyond ordered_limit) go several jobs per call.
        rank = {jid: i for i, jid in enumerate(order)}
        batched: dict[int, list[str]] = {}
        for jid in sorted(wants, key=lambda j: (rank.get(j, len(rank)), job_id_order_key(j))):
            want = wants[jid]
            sj = self._jobs[jid] if self._jobs and jid in self._jobs else want.job
            if want.hold and jid not in self._held:
                continue  # the hold failed; do not pin or reorder it this time
            comment = self._comment_for(want)
            fields: dict[str, object] = {}
            if want.priority is not None and not sj.is_held:
                fields["priority"] = want.priority
            if want.req_nodes is not None and sj.is_pending:
                fields["req_nodes"] = want.req_nodes
            if comment != sj.admin_comment:
                fields["admin_comment"] = comment
            if want.first_look:
                fields["start_now"] = True
            if not fields:
                continue
            if set(fields) == {"priority"} and want.priority == self.config.priority_floor:
                batched.setdefault(want.priority, []).append(jid)
                continue
            self._update(jid, want, report, **fields)  # type: ignore[arg-type]
        for value, jids in batched.items():
            for chunk in _chunks(jids):
                done = self._run_batch(lambda ids, v=value: commands.update_jobs(ids, priority=v), chunk, report)
                for jid in done:
                    self._patch(jid, priority=value)
                    report.priorities += 1

    def _update(self, jid: str, want: _Want, report: ApplyReport, *, priority: int | None = None,
                req_nodes: str | None = None, admin_comment: str | None = None, start_now: bool = False) -> bool:
        """One ``scontrol update`` of one job; on success the observed state and the report follow."""
        sj = self._jobs[jid] if self._jobs and jid in self._jobs else want.job
        if (admin_comment is not None and admin_comment == sj.admin_comment
                and (priority, req_nodes) == (None, None) and not start_now):
            return True
        if admin_comment == sj.admin_comment:
            admin_comment = None
        argv = commands.update_jobs([jid], priority=priority, req_nodes=req_nodes, admin_comment=admin_comment,
                                    start_now=start_now)
        if not self._run_write(argv, report).ok:
            return False
        patch: dict[str, object] = {}
        if start_now:
            want.first_look = False
            report.first_looks += 1
        if priority is not None:
            patch["priority"] = priority
            report.priorities += 1
        if req_nodes is not None:
            patch["required_nodes"] = expand_nodelist(req_nodes)
            if req_nodes:
                report.pins += 1
            else:
                report.pins_cleared += 1
        if admin_comment is not None:
            patch["admin_comment"] = admin_comment
            report.admin_comments += 1
        self._patch(jid, **patch)
        return True

    def _run_batch(self, build: Callable[[list[str]], list[str]], job_ids: list[str],
                   report: ApplyReport) -> list[str]:
        """Run a multi-job command; return the jobs it took for. Slurm applies it to every job it
        can and names the others ("Invalid job id specified for job 42"); when it names none,
        the jobs are tried one by one."""
        if not job_ids:
            return []
        result = self._run_write(build(job_ids), report)
        if result.ok:
            return list(job_ids)
        if len(job_ids) == 1:
            return []
        failed = failed_job_ids(result.stderr) & set(job_ids)
        if failed:
            return [jid for jid in job_ids if jid not in failed]
        done = []
        for jid in job_ids:
            if self._run_write(build([jid]), report).ok:
                done.append(jid)
        return done

    # -- finished jobs ------------------------------------------------------------------------------

    def finished_jobs(self, since_s: float) -> tuple[FinishedJob, ...]:
        """Jobs that ended at or after ``since_s``: from the job completion log, and from
        sacct when ``use_sacct`` (jobcomp's record wins when both have a job).

        Reads only what the log gained since the last call (call with a non-decreasing
        ``since_s``; an earlier one re-reads the file). Raises SlurmUnreachable when the log
        cannot be read or sacct does not answer: never a partial answer that would make a
        missing job look unfinished for good.
        """
        found: dict[str, FinishedJob] = {}
        if self.config.jobcomp_log:
            for record in self._read_jobcomp(since_s):
                found[record.job_id] = record
        if self.config.use_sacct:
            result = self._check(self.runner.run(commands.sacct_finished(since_s)))
            for record in parse_sacct(result.stdout):
                if record.end_time_s >= since_s:
                    found.setdefault(record.job_id, record)
        return tuple(sorted(found.values(), key=lambda r: (r.end_time_s, job_id_order_key(r.job_id))))

    def _read_jobcomp(self, since_s: float) -> list[FinishedJob]:
        path = self.config.jobcomp_log
        assert path
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return []  # slurmctld creates it when the first job ends
        except OSError as exc:
            raise SlurmUnreachable(f"cannot read the job completion log {path}: {exc}") from exc
        if since_s < self._jobcomp_since or stat.st_ino != self._jobcomp_inode or stat.st_size < self._jobcomp_offset:
            self._jobcomp_offset, self._jobcomp_cache = 0, []
            self._jobcomp_inode = stat.st_ino
        self._jobcomp_since = since_s
        try:
            with open(path, "rb") as handle:
                handle.seek(self._jobcomp_offset)
                data = handle.read()
        except OSError as exc:
            raise SlurmUnreachable(f"cannot read the job completion log {path}: {exc}") from exc
        # Whole lines only (a line still being written waits), and of those only up to a record
        # whose name holds a newline and whose rest is not written yet.
        raw = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
        records, rejected, consumed = parse_jobcomp_lines([line.decode(errors="replace") for line in raw], at_end=False)
        starts = [self._jobcomp_offset]
        for line in raw:
            starts.append(starts[-1] + len(line) + 1)
        for bad in rejected:
            # The log itself keeps the lines: the admin finds them at that byte.
            log.warning("job completion log %s, byte %d: %s; not used: %s", path, starts[bad.first_line], bad.reason,
                        bad.text[:300], extra={"action": "jobcomp_bad_record", "path": path})  # fmt: skip
        self._jobcomp_offset = starts[consumed]
        for record in records:
            if record.state in _NOT_FINISHED:
                continue
            self._jobcomp_cache.append(record)
        self._jobcomp_cache = [r for r in self._jobcomp_cache if r.end_time_s >= since_s]
        return list(self._jobcomp_cache)


_NOT_FINISHED = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED"})


def _chunks(items: Sequence[str], size: int = _BATCH) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])



