"""Where an LLM serving job runs: the deployment optimiser's plan applied to a pending job.

A job submitted with ``#ASRPT serve-model=NAME`` (and ``tp=auto`` or ``tp=N``) is an inference
server. ``asrpt serving plan --model NAME --cluster ... --json-out FILE`` ranks, per machine type,
every memory-feasible tensor-parallel degree t by the machine's estimated throughput
``(u / t) * tokens / time`` and reports the best one (``best_tp``). The admin names those
files in ``[serving] plan``; for each pending serving job the daemon then

1. looks up the plan of the job's model (any spelling of the serving tools' model table);
2. among the partitions the job may use (Slurm's view, restricted to the daemon's
   ``[[slurm.partitions]]``) matches each partition's accelerator to a machine type of the
   plan (``serving_accelerator``, else the accelerator's alias in the serving tools' table; a
   machine type with the partition's node size is preferred when the plan has several) and
   leaves out partitions that could never hold the job's accelerators;
3. picks the tensor-parallel degree on each: ``tp=N`` as given (it must divide the job's
   accelerator count, the gang size Slurm allocates, which asrpt never changes), ``tp=auto``
   the plan's best degree, or when that does not divide the gang the best-ranked feasible
   degree that does (the note says why);
4. keeps the partition(s) with the best estimated tokens per second *per accelerator* (the
   job's accelerators are fixed, so this is the most throughput for them); partitions of the
   same machine type tie and are all kept;
5. restricts the core job to those partitions and their accelerator type, and gives it the
   layout ``ParallelConfig(data=g / t, tensor=t)``: g / t serving instances of t ranks;
6. holds the job in Slurm (asrpt's own hold, see :meth:`ServingPlanner.hold_confined`) while
   it does not start and Slurm could start it in a partition the plan left out: Slurm knows
   nothing of the restriction, and with the priority asrpt gives the job it would start it
   on the first free node of any partition the job named (a 70B model on V100s it does not
   fit on). When the policy starts it, the hold is released with the node list pinned.

A job whose model has no plan, or none of whose partitions matches the plan, is scheduled as
an ordinary job; the daemon logs one warning per job naming the job and the model. A plan
file that cannot be read is logged once per change of the file; its model's jobs then get
the same warning, naming the file. Nothing here raises into the cycle.

:func:`parse_plan`, :func:`choose_serving` and :func:`serving_job` are pure; :class:`ServingPlanner`
adds the files, the warnings and the per-job notes that ``asrpt explain`` shows. The
chosen degree is also written into the job's AdminComment (``asrpt: ... serve tp=2``) where
the job's script can read it at start (``scontrol show job $SLURM_JOB_ID``).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from asrpt.core.model import ClusterSnapshot, Decision, Job, ParallelConfig
from asrpt.exceptions import ConfigError
from asrpt.serving.hardware import canonical_accelerator_name
from asrpt.serving.models import canonical_model_name, find_model, known_model_names

log = logging.getLogger(__name__)

#: Plans larger than this are refused (a real plan is a few kilobytes).
MAX_PLAN_BYTES = 4 * 1024 * 1024
#: Throughputs per accelerator this close (relative) are the same machine type's tie.
_TIE = 1e-9


class ServingPlanError(ConfigError):
    """A serving plan file cannot be used; the message names the file."""


class NoServingChoice(Exception):
    """The plan offers nothing for this job; the message says why (for the log)."""


# ---- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCandidate:
    tp: int
    #: Estimated output tokens per second of a whole machine at this degree.
    machine_tok_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanMachine:
    #: The serving tools' accelerator name (``a100-80gb``).
    accelerator: str
    #: Accelerators per machine (u).
    gpus: int
    label: str
    #: The plan's best degree, or None when no degree fits in memory.
    best_tp: int | None
    #: Feasible degrees, best first (the plan's ranking).
    ranked: tuple[PlanCandidate, ...]

    def candidate(self, tp: int) -> PlanCandidate | None:
        return next((c for c in self.ranked if c.tp == tp), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPlan:
    #: The model table's name (``llama2-7b``), whatever spelling the plan used.
    model: str
    machines: tuple[PlanMachine, ...]
    #: Where it was read from (for messages).
    source: str = "<memory>"


def _field(document: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    value = document.get(key)
    kinds_ = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds_) or (isinstance(value, bool) and bool not in kinds_):
        names = " or ".join(k.__name__ for k in kinds_)
        raise ServingPlanError(f"{where}: {key} must be {names}, got {value!r}"[:300])
    return value


def parse_plan(document: Any, source: str = "<memory>") -> ServingPlan:
    """Validate the JSON ``asrpt serving plan`` writes (see ``DeploymentPlan.as_dict``).

    Raises :class:`ServingPlanError` naming ``source`` and what is wrong.
    """
    if not isinstance(document, dict):
        raise ServingPlanError(f"serving plan {source}: not a JSON object (expected the output of `asrpt serving plan`)")
    where = f"serving plan {source}"
    model_name = _field(document, "model", str, where)
    machines_doc = _field(document, "machines", list, where)
    machines = []
    for i, entry in enumerate(machines_doc):
        at = f"{where}: machines[{i}]"
        if not isinstance(entry, dict):
            raise ServingPlanError(f"{at} is not an object")
        accelerator = _field(entry, "accelerator", str, at)
        gpus = _field(entry, "gpus", int, at)
        if gpus < 1:
            raise ServingPlanError(f"{at}: gpus must be >= 1, got {gpus}")
        best = entry.get("best_tp")
        if best is not None and (not isinstance(best, int) or isinstance(best, bool) or best < 1):
            raise ServingPlanError(f"{at}: best_tp must be a positive integer or null, got {best!r}")
        ranked = []
        for j, raw in enumerate(_field(entry, "candidates", list, at)):
            cat = f"{at}.candidates[{j}]"
            if not isinstance(raw, dict):
                raise ServingPlanError(f"{cat} is not an object")
            tp = _field(raw, "tp", int, cat)
            if tp < 1:
                raise ServingPlanError(f"{cat}: tp must be >= 1, got {tp}")
            if not _field(raw, "feasible", bool, cat):
                continue
            tok_s = _field(raw, "machine_tok_s", (int, float), cat)
            if not math.isfinite(tok_s) or tok_s < 0:
                raise ServingPlanError(f"{cat}: machine_tok_s must be a finite number >= 0, got {tok_s!r}")
            ranked.append(PlanCandidate(tp=tp, machine_tok_s=float(tok_s)))
        # The file lists feasible candidates best first; sort anyway (stable, ties keep order).
        ranked.sort(key=lambda c: -c.machine_tok_s)
        if best is not None and not any(c.tp == best for c in ranked):
            raise ServingPlanError(f"{at}: best_tp {best} is not among its feasible candidates")
        if ranked and best is not None and ranked[0].tp != best:
            ranked.sort(key=lambda c: (c.tp != best, -c.machine_tok_s))
        machines.append(
            PlanMachine(
                accelerator=canonical_accelerator_name(accelerator),
                gpus=gpus,
                label=str(entry.get("machine") or f"{accelerator}x{gpus}"),
                best_tp=best if ranked else None,
                ranked=tuple(ranked),
            )
        )
    return ServingPlan(model=canonical_model_name(model_name), machines=tuple(machines), source=source)


def load_plan(path: str | os.PathLike[str]) -> ServingPlan:
    """Read and validate one plan file; :class:`ServingPlanError` names the file."""
    shown = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_PLAN_BYTES + 1)
    except OSError as error:
        raise ServingPlanError(f"serving plan {shown}: cannot read: {error.strerror or error}") from None
    if len(data) > MAX_PLAN_BYTES:
        raise ServingPlanError(f"serving plan {shown}: larger than {MAX_PLAN_BYTES} bytes")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ServingPlanError(f"serving plan {shown}: not JSON: {error}") from None
    return parse_plan(document, shown)


# ---- the choice --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOption:
    """A partition as the choice sees it."""

    name: str
    #: Slurm's accelerator type (what the core job's ``allowed_accelerators`` names).
    accelerator: str
    #: The serving tools' name, matched against the plan's machine types.
    serving_accelerator: str
    #: Accelerators per node (the largest node), when known.
    gpus_per_node: int | None = None
    #: Accelerators of the whole partition, when known.
    total_accelerators: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRequest:
    job_id: str
    #: The model as the user wrote it.
    model: str
    #: The job's accelerators (its gang size in Slurm; never changed).
    accelerators: int
    #: Partitions the job may use; empty means all of ``partitions``.
    allowed_partitions: tuple[str, ...] = ()
    #: ``tp=N``; None for ``tp=auto`` or no tp at all (both use the plan's degree).
    tensor: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingChoice:
    partitions: tuple[str, ...]
    #: Slurm accelerator types of ``partitions``.
    accelerators: tuple[str, ...]
    tensor: int
    data: int
    #: The plan's machine type chosen, and its estimated tokens/s per accelerator at ``tensor``.
    machine: str
    tok_s_per_accelerator: float
    #: One line for ``asrpt explain`` and the log.
    note: str

    @property
    def parallel(self) -> ParallelConfig:
        return ParallelConfig(data=self.data, tensor=self.tensor)


def _machines_for(plan: ServingPlan, option: PartitionOption) -> list[PlanMachine]:
    same = [m for m in plan.machines if m.accelerator == option.serving_accelerator]
    if option.gpus_per_node is not None:
        sized = [m for m in same if m.gpus == option.gpus_per_node]
        if sized:
            return sized
    return same


def _pick_degree(machine: PlanMachine, gang: int, tensor: int | None) -> tuple[PlanCandidate | None, str]:
    """The candidate to use on ``machine`` and why, or (None, why not)."""
    if tensor is not None:
        candidate = machine.candidate(tensor)
        if candidate is None:
            return None, f"tp={tensor} is not feasible on {machine.label} in the plan"
        return candidate, ""
    if not machine.ranked:
        return None, f"no tensor-parallel degree fits {machine.label} in the plan"
    for i, candidate in enumerate(machine.ranked):
        if gang % candidate.tp == 0:
            if i == 0:
                return candidate, ""
            return candidate, (
                f"best TP {machine.ranked[0].tp} does not divide the job's {gang} accelerators; "
                f"TP {candidate.tp} is the best-ranked that does"
            )
    return None, f"no feasible TP on {machine.label} ({', '.join(str(c.tp) for c in machine.ranked)}) divides the job's {gang} accelerators"


def _score(
    plan: ServingPlan, eligible: Sequence[PartitionOption], gang: int, tensor: int | None
) -> tuple[list[tuple[float, PartitionOption, PlanMachine, PlanCandidate, str]], list[str]]:
    """(tokens/s per accelerator, partition, machine type, degree, note) of every eligible
    partition the plan can serve the job on, and why each other one cannot."""
    why_not: list[str] = []
    scored: list[tuple[float, PartitionOption, PlanMachine, PlanCandidate, str]] = []
    for option in eligible:
        if option.total_accelerators is not None and option.total_accelerators < gang:
            why_not.append(f"{option.name} has only {option.total_accelerators} accelerators")
            continue
        machines = _machines_for(plan, option)
        if not machines:
            why_not.append(f"{option.name} ({option.serving_accelerator}) is not a machine type of the plan")
            continue
        best: tuple[float, PlanMachine, PlanCandidate, str] | None = None
        for machine in machines:
            candidate, why = _pick_degree(machine, gang, tensor)
            if candidate is None:
                why_not.append(f"{option.name}: {why}")
                continue
            score = candidate.machine_tok_s / machine.gpus
            if best is None or score > best[0]:
                best = (score, machine, candidate, why)
        if best is not None:
            scored.append((best[0], option, best[1], best[2], best[3]))
    return scored, why_not


def choose_serving(plan: ServingPlan, partitions: Sequence[PartitionOption], request: ServingRequest) -> ServingChoice:
    """Partition(s) and tensor-parallel degree for a serving job (pure).

    ``tp=N`` is kept when it divides the job's accelerators; the partition is then the best
    one where the plan has N feasible, or, when it has N nowhere the job may go, the best by
    the plan's own degrees (the note says so). Raises :class:`NoServingChoice` with the
    reason when the plan offers none of the job's partitions anything; the caller schedules
    the job as an ordinary one.
    """
    gang = request.accelerators
    if gang < 1:
        raise NoServingChoice(f"the job asks for {gang} accelerators")
    tensor = request.tensor
    notes: list[str] = []
    if tensor is not None and gang % tensor != 0:
        notes.append(f"tp={tensor} does not divide the job's {gang} accelerators, so the plan's degree is used")
        tensor = None
    eligible = [p for p in partitions if not request.allowed_partitions or p.name in request.allowed_partitions]
    if not eligible:
        raise NoServingChoice(f"none of the job's partitions ({', '.join(request.allowed_partitions)}) is in the daemon's layout")
    scored, why_not = _score(plan, eligible, gang, tensor)
    forced = None
    if not scored and tensor is not None:
        # The plan has tp=N nowhere the job may go: keep the user's degree, pick the
        # partition by the plan's own degrees.
        notes.append(f"tp={tensor} kept as asked although the plan has it nowhere the job may run ({'; '.join(why_not)})")
        forced, tensor = tensor, None
        scored, why_not = _score(plan, eligible, gang, None)
    if not scored:
        raise NoServingChoice("; ".join(why_not) or "no partition matches the plan")
    top = max(entry[0] for entry in scored)
    kept = [entry for entry in scored if entry[0] >= top * (1 - _TIE)]
    _, _, machine, candidate, why = kept[0]
    if why:
        notes.append(why)
    degree = forced or candidate.tp
    if forced is not None or tensor is not None:
        how = f"TP {degree} (as asked)"
    elif candidate.tp == machine.best_tp:
        how = f"TP {degree} (the plan's best)"
    else:
        how = f"TP {degree}"
    names = tuple(entry[1].name for entry in kept)
    note = (
        f"serving {plan.model}: partition {','.join(names)} ({machine.label}, "
        f"{top:.0f} tok/s per accelerator by the plan), {how} x {gang // degree} instance(s)"
    )
    if notes:
        note += "; " + "; ".join(notes)
    return ServingChoice(
        partitions=names,
        accelerators=tuple(sorted({entry[1].accelerator for entry in kept})),
        tensor=degree,
        data=gang // degree,
        machine=machine.label,
        tok_s_per_accelerator=top,
        note=note,
    )


def serving_job(job: Job, choice: ServingChoice) -> Job:
    """``job`` restricted to the chosen partitions with the serving layout (pure)."""
    return replace(
        job,
        parallel=ParallelConfig(data=choice.data, tensor=choice.tensor),
        allowed_partitions=choice.partitions,
        allowed_accelerators=choice.accelerators,
    )


def partition_options(
    snapshot: ClusterSnapshot, serving_accelerators: Mapping[str, str | None] | None = None
) -> list[PartitionOption]:
    """The snapshot's partitions with node sizes, and their serving accelerator names
    (``serving_accelerators[name]`` when set, else the accelerator's alias)."""
    overrides = serving_accelerators or {}
    per_node: dict[str, int] = {}
    total: dict[str, int] = {}
    for node in snapshot.nodes:
        per_node[node.partition] = max(per_node.get(node.partition, 0), node.accelerators_total)
        total[node.partition] = total.get(node.partition, 0) + node.accelerators_total
    return [
        PartitionOption(
            name=p.name,
            accelerator=p.accelerator,
            serving_accelerator=canonical_accelerator_name(overrides.get(p.name) or p.accelerator),
            gpus_per_node=per_node.get(p.name),
            total_accelerators=total.get(p.name),
        )
        for p in snapshot.partitions
    ]


# ---- the daemon's side ---------------------------------------------------------------------------


def plan_files(paths: Iterable[str]) -> list[str]:
    """``[serving] plan`` expanded: files as given, directories to their ``*.json`` files."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            out.extend(sorted(str(p) for p in Path(path).glob("*.json") if p.is_file()))
        else:
            out.append(path)
    return out


class ServingPlanner:
    """Plans by model, re-read when their files change; applies them to serving jobs.

    Warnings are logged once per (job, message) and once per change of a broken file, so a
    job waiting for hours does not fill the log. ``notes`` holds each serving job's note for
    ``asrpt explain`` (the choice, or why it is an ordinary job).
    """

    def __init__(self, paths: Sequence[str], serving_accelerators: Mapping[str, str | None] | None = None) -> None:
        self.paths = tuple(paths)
        self.serving_accelerators = dict(serving_accelerators or {})
        self.plans: dict[str, ServingPlan] = {}
        #: Files that could not be used, with the error.
        self.errors: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        #: Each placed serving job's choice (pending, and running ones placed earlier).
        self.choices: dict[str, ServingChoice] = {}
        #: This cycle's pending serving jobs that Slurm could start in a partition their plan
        #: left out, with those partitions (:meth:`hold_confined` holds them unless started).
        self.confined: dict[str, tuple[str, ...]] = {}
        self._signature: tuple[Any, ...] | None = None
        self._options: list[PartitionOption] = []
        self._warned: set[tuple[str, str]] = set()

    def refresh(self) -> None:
        """(Re)load the plans if any file appeared, changed or went away."""
        files = plan_files(self.paths)
        signature = []
        for path in files:
            try:
                st = os.stat(path)
                signature.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                signature.append((path, None, None, None))
        if tuple(signature) == self._signature:
            return
        self._signature = tuple(signature)
        plans: dict[str, ServingPlan] = {}
        errors: dict[str, str] = {}
        for path in files:
            try:
                plan = load_plan(path)
            except ServingPlanError as error:
                errors[path] = str(error)
                log.warning("%s; jobs serving its model are scheduled as ordinary jobs", error,
                            extra={"action": "serving_plan_unusable", "path": path})
                continue
            if plan.model in plans:
                log.warning("serving plans %s and %s are both for %s; using %s", plans[plan.model].source, path,
                            plan.model, path, extra={"action": "serving_plan_duplicate", "path": path})
            plans[plan.model] = plan
        if plans:
            log.info("serving plans: %s", ", ".join(f"{m} ({p.source})" for m, p in sorted(plans.items())))
        self.plans, self.errors = plans, errors

    def begin_cycle(self, snapshot: ClusterSnapshot, live_job_ids: Iterable[str]) -> None:
        try:
            self.refresh()
        except Exception:  # the plans must never break a cycle
            log.exception("reading the serving plans failed")
        self._options = partition_options(snapshot, self.serving_accelerators)
        self.confined = {}
        live = set(live_job_ids)
        self.notes = {k: v for k, v in self.notes.items() if k in live}
        self.choices = {k: v for k, v in self.choices.items() if k in live}
        self._warned = {w for w in self._warned if w[0] in live}

    def apply(self, job: Job, model: str, tensor: int | None) -> Job:
        """``job`` placed by its model's plan, or ``job`` unchanged with a warning."""
        try:
            plan = self._plan_for(job.job_id, model)
            choice = choose_serving(
                plan,
                self._options,
                ServingRequest(job_id=job.job_id, model=model, accelerators=job.accelerators,
                               allowed_partitions=job.allowed_partitions, tensor=tensor),
            )
        except NoServingChoice as why:
            self._ordinary(job.job_id, model, str(why))
            return job
        except Exception as error:  # a bug here must not cost the cycle
            log.exception("serving choice for job %s failed", job.job_id)
            self._ordinary(job.job_id, model, f"internal error: {error!r}")
            return job
        self.choices[job.job_id] = choice
        self.notes[job.job_id] = choice.note
        # Partitions Slurm may use for the job (big enough for it) that the plan left out.
        left_out = tuple(
            o.name for o in self._options
            if o.name in job.allowed_partitions and o.name not in choice.partitions
            and (o.total_accelerators is None or o.total_accelerators >= job.accelerators)
        )
        if left_out:
            self.confined[job.job_id] = left_out
        if (job.job_id, choice.note) not in self._warned:
            self._warned.add((job.job_id, choice.note))
            log.info("job %s: %s", job.job_id, choice.note, extra={"action": "serving_choice", "job_id": job.job_id})
        return serving_job(job, choice)

    def hold_confined(self, decision: Decision) -> Decision:
        """``decision`` plus an asrpt hold on each confined serving job it does not start.

        Released (with the pin) by the cycle whose decision starts it, or as soon as it is no
        longer confined (its plan changed, or it became an ordinary job).
        """
        starting = {p.job_id for p in decision.starts}
        held = [j for j in self.confined if j not in starting and j not in decision.holds]
        if not held:
            return decision
        reasons = dict(decision.reasons)
        for job_id in held:
            choice = self.choices[job_id]
            why = (f"held by asrpt until it can start in partition {','.join(choice.partitions)} "
                   f"(Slurm alone could start it in {','.join(self.confined[job_id])})")
            reasons[job_id] = f"{reasons[job_id]}; {why}" if reasons.get(job_id) else why
        return replace(decision, holds=(*decision.holds, *held), reasons=reasons)

    def _plan_for(self, job_id: str, model: str) -> ServingPlan:
        plan = self.plans.get(canonical_model_name(model))
        if plan is not None:
            return plan
        if find_model(model) is None:
            raise NoServingChoice(f"{model!r} is not a model the serving tools know (known: {', '.join(known_model_names())})")
        if self.errors:
            raise NoServingChoice(f"no usable serving plan covers it; unusable: {'; '.join(self.errors.values())}")
        if not self.paths:
            raise NoServingChoice("no serving plans are configured ([serving] plan)")
        covered = ", ".join(sorted(self.plans)) or "none"
        raise NoServingChoice(f"no serving plan covers it (plans for: {covered}); run `asrpt serving plan --model {model}`")

    def _ordinary(self, job_id: str, model: str, why: str) -> None:
        message = f"job {job_id} (serve-model={model}): {why}; scheduling it as an ordinary job"
        self.choices.pop(job_id, None)
        self.notes[job_id] = f"serving {model}: ordinary job ({why})"
        if (job_id, message) not in self._warned:
            self._warned.add((job_id, message))
            log.warning("%s", message, extra={"action": "serving_ordinary", "job_id": job_id})
