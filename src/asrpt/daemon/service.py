"""``asrptd``'s work, one method per scheduled job: cycle, sync finished jobs, retrain.

The cycle is the shared ``SchedulingLoop`` with the Slurm backend, the system clock and the
history enrichment; this module only wires it and keeps what must survive a restart (the
policy state) in the database after every successful cycle. A cycle that cannot read Slurm
changes nothing: no state is saved, no job is marked finished, nothing is written to Slurm.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Mapping

from asrpt.core.comm import iteration_time_s
from asrpt.core.dispatch import DispatchOptions
from asrpt.core.model import Decision, Job, ParallelConfig, Partition
from asrpt.core.placement import alpha_min_s
from asrpt.core.policies import ASRPTOptions, make_policy
from asrpt.core.speed import SpeedTable, default_speed_table
from asrpt.daemon.config import DaemonConfig
from asrpt.daemon.enrich import HistoryEnrichment
from asrpt.daemon.forecasts import forecast_records
from asrpt.daemon.isolate import ordinary_job, usable_job
from asrpt.daemon.model import DaemonPredictor
from asrpt.daemon.serving import ServingPlanner
from asrpt.daemon.spool_ages import SpoolWaitAges
from asrpt.db.repository import ForecastRecord, HistoryRepository, OutcomeRecord
from asrpt.exceptions import AsrptError
from asrpt.loop import SchedulingLoop
from asrpt.sim.forecast import JobForecast, forecast, predicted_or_time_limit
from asrpt.slurm.cli_backend import SlurmCliBackend
from asrpt.slurm.records import SlurmJob
from asrpt.slurm.runner import DryRunRunner
from asrpt.ingest import plugin_spool, wrapper_spool

log = logging.getLogger(__name__)


#: An ETA is rewritten in Slurm only when its start or end moved by this much: a forecast
#: drifts a little every cycle and each rewrite is an scontrol call.
ETA_REWRITE_S = 600.0


class SystemClock:
    def now_s(self) -> float:
        return time.time()


def speed_table_for(config: DaemonConfig, base: SpeedTable | None = None) -> SpeedTable:
    """The default speed table plus the configured relative-speed accelerators (NPUs)."""
    table = base or default_speed_table()
    for part in config.partitions:
        if part.relative_speed is not None and not table.knows(part.accelerator):
            table = table.with_relative_speed(part.accelerator, part.relative_speed, part.relative_to)
    return table


def policy_options(config: DaemonConfig) -> ASRPTOptions:
    sched = config.scheduler
    return ASRPTOptions(
        dispatch=DispatchOptions(
            mode=sched.mode,  # type: ignore[arg-type]
            comm_heavy_ratio=sched.comm_heavy_ratio,
            comm_heavy_tau=sched.comm_heavy_tau,
            backfill_depth=sched.backfill_depth,
        ),
        queue_order=sched.queue_order,  # type: ignore[arg-type]
        overdue_after_s=sched.overdue_after_s,
        virtual_machine=sched.virtual_machine,  # type: ignore[arg-type]
        time_limit_cap=sched.time_limit_cap,
        preempt_ratio=sched.preempt_ratio,
        preempt_exempt_s=sched.preempt_exempt_s,
        max_requeues=sched.max_requeues,
    )


def format_eta(forecast_: JobForecast | None, now_s: float) -> str | None:
    """The ETA text written to a job's AdminComment (UTC, minute resolution). A job whose
    length is unknown (no history) reads ``end unknown, at most <start + time limit>``, or
    ``end unknown`` without a limit, rather than a made-up time; no text when even the start
    is unknown."""
    if forecast_ is None or not math.isfinite(forecast_.start_s):
        return None

    def at(t_s: float) -> str:
        return datetime.fromtimestamp(t_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ")

    try:
        end = at(forecast_.end_s) if math.isfinite(forecast_.end_s) else "unknown"
        if forecast_.end_unknown and math.isfinite(forecast_.end_s):
            end = f"unknown, at most {end}"
        if forecast_.running:
            return f"eta end {end}"
        return f"eta start {at(forecast_.start_s)} end {end}"
    except (OverflowError, OSError, ValueError):  # beyond the calendar (year 9999): no ETA to show
        return None


@dataclass(slots=True)
class CycleStats:
    """What the HTTP metrics report."""

    cycles: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_cycle_s: float = 0.0
    last_duration_s: float = 0.0
    last_error: str = ""
    pending: int = 0
    running: int = 0
    slurm_writes: int = 0
    spool_accepted: int = 0
    forecasts: dict[str, JobForecast] = field(default_factory=dict)
    last_decision: Decision | None = None
    #: The last cycle's forecasts as stored (what the HTTP endpoint serves), and when made.
    forecast_rows: tuple[ForecastRecord, ...] = ()
    forecast_made_at_s: float | None = None
    held: int = 0
    #: Cycles whose forecasts could not be stored (the cycle itself still counted).
    forecast_failures: int = 0
    #: Failed cycles whose error was not one asrpt raises on purpose (a bug, or data the
    #: per-job checks missed): the daemon keeps running, /healthz says degraded.
    escaped: int = 0
    #: Jobs whose own data could not be used and which were scheduled as ordinary jobs.
    jobs_isolated: int = 0
    #: Cycles in a row in which Slurm could not be polled: what the back-off grows with. The
    #: first poll that answers resets it, even if that cycle fails later (held jobs wait).
    backoff_failures: int = 0


class _ServingHolds:
    """The policy as the daemon's loop sees it: its decisions, plus asrpt's holds on the
    serving jobs that their plan confines and that do not start now
    (:meth:`ServingPlanner.hold_confined`)."""

    def __init__(self, policy: Any, serving: ServingPlanner, daemon: "Daemon | None" = None) -> None:
        self.policy = policy
        self.serving = serving
        self.daemon = daemon

    def decide(self, snapshot: Any, now_s: float, state: Any) -> Decision:
        before = state.to_dict() if self.daemon is not None and snapshot.pending else None
        try:
            return self.serving.hold_confined(self.policy.decide(snapshot, now_s, state))
        except AsrptError:
            raise
        except Exception as error:
            if before is None:
                raise
            try:
                return self._isolating(snapshot, now_s, before, error)
            except Exception:
                assert self.daemon is not None
                self.daemon.loop.state = self.policy.restore_state(before)  # the cycle changes nothing
                raise

    def _isolating(self, snapshot: Any, now_s: float, before: dict[str, Any], error: Exception) -> Decision:
        """The policy failed on this queue: find the one pending job whose data it fails on
        (bisection over "these jobs as ordinary ones", each try on a copy of the state from
        before the cycle), schedule it as an ordinary job, or leave it to Slurm if even that
        fails. Raises ``error`` when no single job explains the failure."""
        daemon = self.daemon
        assert daemon is not None
        pending = list(snapshot.pending)
        plain = lambda job: ordinary_job(job, now_s, daemon.speed, daemon.config.slurm.default_workload_class)  # noqa: E731

        def attempt(jobs: list[Job]) -> tuple[Decision, Any] | None:
            trial_state = self.policy.restore_state(before)
            try:
                decision = self.policy.decide(replace(snapshot, pending=tuple(jobs)), now_s, trial_state)
            except AsrptError:
                raise
            except Exception:
                return None
            return self.serving.hold_confined(decision), trial_state

        def first_plain(k: int) -> list[Job]:
            return [plain(job) if i < k else job for i, job in enumerate(pending)]

        if attempt(first_plain(len(pending))) is None:
            raise error  # not one job's data: the policy fails on ordinary jobs too
        low, high = 0, len(pending)  # first_plain(low) fails, first_plain(high) works
        while high - low > 1:
            middle = (low + high) // 2
            if attempt(first_plain(middle)) is None:
                low = middle
            else:
                high = middle
        culprit = pending[high - 1]
        reason = f"the policy failed on this job's data ({type(error).__name__}: {str(error)[:200]}); "
        rest = [job for job in pending if job.job_id != culprit.job_id]
        made = attempt([plain(job) if job.job_id == culprit.job_id else job for job in pending])
        if made is not None:
            reason += "scheduled as an ordinary job"
        else:
            made = attempt(rest)
            reason += "left to Slurm's own scheduling this cycle"
        if made is None:
            raise error  # more than one job's data: fail the cycle (counted, /healthz degraded)
        daemon.enrichment.isolate(culprit.job_id, reason)
        decision, trial_state = made
        daemon.loop.state = trial_state  # the failed decide may have left the old one half-updated
        return decision


class _PollWatch:
    """The backend as the loop sees it: a poll that answers ends the back-off at once."""

    def __init__(self, daemon: "Daemon") -> None:
        self._daemon = daemon

    def snapshot(self) -> Any:
        snapshot = self._daemon.backend.snapshot()
        self._daemon.stats.backoff_failures = 0
        return snapshot

    def apply(self, decision: Decision) -> None:
        self._daemon.backend.apply(decision)


class Daemon:
    def __init__(
        self,
        config: DaemonConfig,
        *,
        repository: HistoryRepository,
        backend: SlurmCliBackend | None = None,
        clock: Any = None,
        speed: SpeedTable | None = None,
        dry_run: bool = False,
        database_guard: Any = None,
    ) -> None:
        self.config = config
        #: Checks before each cycle that the history file is still the one opened (dbguard).
        self.database_guard = database_guard
        self.repository = repository
        self.clock = clock or SystemClock()
        self.speed = speed_table_for(config, speed)
        runner = None
        if dry_run:
            slurm = config.slurm
            runner = DryRunRunner(slurm_conf=slurm.slurm_conf, bin_dir=slurm.bin_dir, timeout_s=slurm.timeout_s, retries=slurm.retries)
        self.backend = backend or SlurmCliBackend(
            config.slurm, runner=runner, iteration_time_s=self._iteration_time_s, admin_comment=self._admin_comment
        )
        self.policy = make_policy(config.daemon.policy, self.speed, policy_options(config))
        self.predictor = DaemonPredictor(
            repository,
            unseen_policy=config.scheduler.unseen_policy,
            estimate=config.scheduler.estimate,
            unseen_reference=config.scheduler.unseen_reference,
        )
        self.serving = ServingPlanner(
            config.serving.plan, {p.name: p.serving_accelerator for p in config.partitions}
        )
        try:
            self.serving.refresh()  # logs unusable plans at start
        except Exception:  # never fatal: each cycle tries again
            log.exception("reading the serving plans failed")
        self.enrichment = HistoryEnrichment(
            repository,
            self.predictor.predict,
            slurm_jobs=lambda: self.backend.jobs,
            ingest=self._ingest_spool,
            model_version=lambda: self.predictor.version,
            serving=self.serving,
            check=lambda job, now_s: usable_job(job, now_s, self.speed, config.slurm.default_workload_class),
            plain=lambda job, now_s: ordinary_job(job, now_s, self.speed, config.slurm.default_workload_class),
        )
        self.state_key = f"policy:{self.policy.name}"
        saved = repository.load_state(self.state_key)
        state = self.policy.restore_state(saved) if saved else self.policy.new_state()
        self.loop = SchedulingLoop(
            backend=_PollWatch(self), clock=self.clock, policy=_ServingHolds(self.policy, self.serving, self),
            predictions=self.enrichment, state=state,
        )
        self.stats = CycleStats()
        #: Per-iteration time of each running job's placement, for outcomes without iterations.
        self._alpha_by_job: dict[str, float] = {}
        self._last_sync_s = repository.load_state("sync:last_end_s") or 0.0
        #: ETA text last written per job, with the start/end it showed (hysteresis).
        self._eta_written: dict[str, tuple[str, float, float]] = {}
        #: How long each spool record has waited, robust to wall-clock steps.
        self._spool_ages = SpoolWaitAges()
        #: The current (or last) cycle's clock reading, passed to all its steps.
        self._cycle_now_s: float | None = None
        #: (error type, message) of unexpected cycle errors already logged with a traceback.
        self._errors_logged: set[tuple[str, str]] = set()

    # -- the scheduled jobs ----------------------------------------------------------------
    def cycle(self) -> Decision | None:
        """One scheduling cycle; returns the decision, or None when it failed (Slurm or the
        database unavailable, or an unexpected error: counted, and shown by /healthz)."""
        self.stats.backoff_failures += 1  # reset by the poll as soon as Slurm answers
        try:
            return self._cycle()
        except AsrptError as error:
            self._failed(str(error))
            log.warning("cycle skipped, nothing changed: %s", error)
            return None
        except Exception as error:  # never let one fault stop the cluster's scheduling
            self.stats.escaped += 1
            text = f"{type(error).__name__}: {error}"
            self._failed(text)
            # The traceback once per kind of error: the same fault recurs every cycle.
            key = (type(error).__name__, str(error))
            if key not in self._errors_logged:
                self._errors_logged.add(key)
                log.exception("cycle failed, nothing saved: %s (unexpected; logged once)", text)
            else:
                log.warning("cycle failed again: %s", text)
            return None
        finally:
            self.stats.jobs_isolated = self.enrichment.isolated_total

    def _cycle(self) -> Decision:
        if self.database_guard is not None:
            self.database_guard.check()
        started = time.perf_counter()
        now_s = self._cycle_now_s = self.clock.now_s()  # the cycle's one clock reading
        self._pending_forecast: tuple[Any, float] | None = None
        decision = self.loop.tick(now_s)
        self.repository.save_state(self.state_key, self.loop.state.to_dict(), now_s=now_s)
        if self.loop.last_snapshot is not None and len(self._eta_written) > 2 * (
            len(self.loop.last_snapshot.pending) + len(self.loop.last_snapshot.running) + 1
        ):
            live = {j.job_id for j in self.loop.last_snapshot.pending} | {r.job.job_id for r in self.loop.last_snapshot.running}
            self._eta_written = {k: v for k, v in self._eta_written.items() if k in live}
        self.stats.cycles += 1
        self.stats.consecutive_failures = 0
        self.stats.last_cycle_s = now_s
        self.stats.last_duration_s = time.perf_counter() - started
        self.stats.last_decision = decision
        report = getattr(self.backend, "last_apply", None)
        self.stats.slurm_writes += int(getattr(report, "calls", 0) or 0)
        self.record_forecasts(decision, now_s)
        return decision

    def _failed(self, text: str) -> None:
        self.stats.failures += 1
        self.stats.consecutive_failures += 1
        self.stats.last_error = text[:500]

    def record_forecasts(self, decision: Decision, now_s: float) -> int:
        """Store this cycle's forecasts (the ones the AdminComments were written from) for
        ``asrpt queue/eta/explain`` and keep them for the HTTP endpoint; returns the rows.

        A forecast or database failure is logged and counted; it never fails the cycle.
        """
        snapshot = self.loop.last_snapshot
        if snapshot is None:
            return 0
        made = getattr(self, "_pending_forecast", None)
        if made is None or made[0] is not decision:  # no AdminComment asked for it this cycle
            self._pending_forecast = (decision, 0.0)
            self.stats.forecasts = self._forecast()
        slurm_jobs = getattr(self.backend, "jobs", None) or {}
        try:
            rows = forecast_records(
                snapshot,
                decision,
                self.stats.forecasts,
                policy=self.policy.name,
                state=self.loop.state,
                expected_iterations=self._expected_iterations(snapshot),
                job_names={job_id: sj.name or "" for job_id, sj in slurm_jobs.items()},
                job_users={job_id: sj.user for job_id, sj in slurm_jobs.items()},
                job_partitions={job_id: sj.partitions for job_id, sj in slurm_jobs.items()},
                notes=self.enrichment.notes,
            )
        except Exception:  # the forecast view must never break a cycle
            log.exception("building the forecast rows failed")
            self.stats.forecast_failures += 1
            return 0
        self.stats.forecast_rows = tuple(rows)
        self.stats.forecast_made_at_s = now_s
        self.stats.pending = len(snapshot.pending)
        self.stats.running = len(snapshot.running)
        self.stats.held = sum(1 for row in rows if row.held)
        try:
            self.repository.record_forecasts(now_s, rows)
        except Exception as error:  # the decision is made and written: only the view is stale
            self.stats.forecast_failures += 1
            log.warning("forecasts not stored: %s: %s", type(error).__name__, error)
        return len(rows)

    def release_holds(self) -> int:
        """Release every hold asrpt placed and every node list it pinned (asrptd is stopping):
        a job held for a consolidated placement must not wait for a daemon that is gone.
        Priorities stay as last written; Slurm schedules on its own. Returns the releases."""
        self._cycle_now_s = self.clock.now_s()
        try:
            self.backend.snapshot()
            self.backend.apply(Decision(order=()))
        except Exception as error:  # stopping anyway: say what is left held
            log.error("could not release asrpt's holds on stop: %s: %s; they stay until asrptd runs again", type(error).__name__, error)
            return 0
        released = int(getattr(getattr(self.backend, "last_apply", None), "releases", 0) or 0)
        if released:
            log.info("released %d job(s) asrpt held", released)
        return released

    def sync_finished(self) -> int:
        """Record the outcome of every job that ended since the last sync (for the predictor)."""
        try:
            finished = self.backend.finished_jobs(self._last_sync_s)
        except AsrptError as error:
            log.warning("finished-job sync skipped: %s", error)
            return 0
        recorded = 0
        for job in finished:
            if self.repository.get_submission(job.job_id) is None:
                continue  # not an accelerator job we scheduled
            runtime_s = job.runtime_s
            alpha_s = self._alpha_by_job.pop(job.job_id, None) or self._alpha_from_history(job.job_id)
            # Jobs rarely report iterations; their run time over the modelled per-iteration time
            # of their placement is the estimate the predictor learns from.
            iterations = runtime_s / alpha_s if runtime_s is not None and alpha_s else None
            try:
                self.repository.record_outcome(
                    OutcomeRecord(
                        slurm_job_id=job.job_id,
                        start_time_s=job.start_time_s,
                        end_time_s=job.end_time_s,
                        exit_state=job.state,
                        exit_code=job.exit_code,
                        nodes=",".join(job.nodes) or None,
                        iterations=iterations,
                    )
                )
            except AsrptError:
                raise  # the database is down: the next sync starts from the same point
            except Exception as error:  # this job's outcome only; its time must not move the sync point
                log.warning("job %s: outcome not recorded (%s: %s)", job.job_id, type(error).__name__, error)
                continue
            recorded += 1
            self._last_sync_s = max(self._last_sync_s, job.end_time_s or 0.0)
        self.repository.save_state("sync:last_end_s", self._last_sync_s)
        return recorded

    def _alpha_from_history(self, job_id: str) -> float | None:
        """Ideal per-iteration time of a job that ended before a cycle saw it run."""
        submission = self.repository.get_submission(job_id)
        snapshot = self.loop.last_snapshot
        if submission is None or snapshot is None or not submission.accelerators:
            return None
        d, p, t = submission.parallel_data, submission.parallel_pipeline, submission.parallel_tensor
        parallel = (
            ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=submission.micro_batches or 1)
            if d and p and t and d * p * t == submission.accelerators
            else ParallelConfig.data_parallel(submission.accelerators)
        )
        job = Job(
            job_id=job_id,
            submit_time_s=submission.submit_time_s,
            parallel=parallel,
            workload_class=submission.workload_class or self.config.slurm.default_workload_class,
            allowed_partitions=tuple(p for p in submission.partitions if any(q.name == p for q in snapshot.partitions)),
        )
        alpha_s = alpha_min_s(job, snapshot.partitions, snapshot.nodes, self.speed)
        return None if math.isinf(alpha_s) else alpha_s

    def retrain(self) -> int:
        """Refit the forest; if it learnt anything, re-predict the pending jobs next cycle."""
        rows = self.predictor.retrain(self.clock.now_s())
        if rows:
            self.enrichment.repredict_pending()
        return rows

    # -- hooks the backend calls -------------------------------------------------------------
    def _iteration_time_s(self, job: Job, worker_nodes: tuple[str, ...], partition: Partition) -> float:
        """The backend asks this while reading squeue, before the enrichment has checked the
        job: an unusable class or layout is replaced here too (the reason is noted then)."""
        job, _ = usable_job(job, self._now_s(), self.speed, self.config.slurm.default_workload_class)
        try:
            alpha_s = iteration_time_s(job, worker_nodes, partition, self.speed)
        except Exception:  # this running job's progress is unknown; the snapshot goes on
            log.exception("job %s: no per-iteration time for its placement", job.job_id)
            return math.inf
        self._alpha_by_job[job.job_id] = alpha_s
        return alpha_s

    def _admin_comment(self, job_id: str, decision: Decision) -> str | None:
        """asrpt's AdminComment text for ``job_id``: the ETA, and a serving job's chosen
        tensor-parallel degree (``serve tp=2``), which its script can read at start.
        An error for one job leaves that job's text out, never the other jobs' writes."""
        try:
            return self._admin_comment_of(job_id, decision)
        except Exception as error:
            self.enrichment.note(job_id, f"no ETA written ({type(error).__name__}: {error})")
            return None

    def _admin_comment_of(self, job_id: str, decision: Decision) -> str | None:
        text = self._eta_text(job_id, decision)
        choice = self.serving.choices.get(job_id)
        if choice is None:
            return text
        return f"{text} serve tp={choice.tensor}" if text else f"serve tp={choice.tensor}"

    def _eta_text(self, job_id: str, decision: Decision) -> str | None:
        """The ETA for ``job_id``; the forecast is made once per cycle, on the first ask."""
        if self._pending_forecast is None or self._pending_forecast[0] is not decision:
            self._pending_forecast = (decision, 0.0)
            self.stats.forecasts = self._forecast()
        forecast_ = self.stats.forecasts.get(job_id)
        written = self._eta_written.get(job_id)
        if (
            forecast_ is not None
            and written is not None
            and abs(forecast_.start_s - written[1]) < ETA_REWRITE_S
            and abs(forecast_.end_s - written[2]) < ETA_REWRITE_S
        ):
            return written[0]  # close enough: no scontrol write for a drift of a few minutes
        text = format_eta(forecast_, self._now_s())
        if forecast_ is not None and text is not None:
            self._eta_written[job_id] = (text, forecast_.start_s, forecast_.end_s)
        return text

    def _forecast(self) -> dict[str, JobForecast]:
        snapshot = self.loop.last_snapshot
        if snapshot is None:
            return {}
        now_s = self._now_s()
        try:
            return forecast(snapshot, now_s, self.policy, self.loop.state.to_dict(), self._expected_iterations(snapshot),
                            unknown_length=self.enrichment.length_unknown)
        except Exception:  # a forecast must never break a cycle
            log.exception("forecast failed")
            return {}

    def _now_s(self) -> float:
        """This cycle's clock reading; outside a cycle (the stop's release), the clock's."""
        return self.clock.now_s() if self._cycle_now_s is None else self._cycle_now_s

    def _expected_iterations(self, snapshot: Any):
        """What a forecast assumes each job runs: the one rule the accuracy replay uses too."""
        return predicted_or_time_limit(snapshot, self.speed)

    def _ingest_spool(self, jobs: Mapping[str, SlurmJob]) -> int:
        """Store the wrapper's records whose owner Slurm confirms; others wait or are rejected.
        Then (``[spool] plugin_dir``) job_submit.lua's records, matched by their AdminComment tag."""
        accepted = 0
        seen: set[Any] = set()

        def waited_s(record: Any, now_s: float) -> float:
            seen.add(record.file_id)
            return self._spool_ages.age_s(record.file_id, record.spooled_at_s, now_s)

        if self.config.spool.plugin_dir:
            accepted += plugin_spool.ingest_plugin_spool(
                self.config.spool.plugin_dir,
                jobs,
                self.repository.record_submission,
                trusted_uids=plugin_spool.uids_of(self.config.spool.plugin_owners),
                accelerator_gres=self.config.slurm.accelerator_gres,
                max_age_s=self.config.spool.max_age_s,
                age_of=lambda record, now_s: waited_s(record, now_s),
            ).stored
        # sbatch printed an array's id; squeue lists its tasks (<array>_<task>), same owner.
        users = {sj.array_job_id: sj.user for sj in jobs.values() if sj.array_job_id}
        users.update((job_id, sj.user) for job_id, sj in jobs.items())
        records = wrapper_spool.read_spool(self.config.spool.dir)
        now_s = time.time()
        for record in records:
            if wrapper_spool.accept_record(
                record,
                users.get,
                now_s=now_s,
                max_pending_age_s=self.config.spool.max_age_s,
                age_s=waited_s(record, now_s),
            ):
                try:
                    self.repository.record_submission(wrapper_spool.to_submission_record(record))
                except AsrptError:
                    raise  # the database is down: the record waits in the spool
                except Exception as error:  # this record only: set it aside, the cycle goes on
                    wrapper_spool.set_aside(record, f"storing it failed: {type(error).__name__}: {error}")
                    continue
                wrapper_spool.remove(record)
                accepted += 1
        self.stats.spool_accepted += accepted
        self._spool_ages.keep_only(seen)
        return accepted
