"""How right the forecasts are: predict at submission during a replay, compare afterwards.

During a replay, when a sampled job is submitted, the live scheduler's snapshot and policy
state at that moment are handed to :func:`asrpt.sim.forecast.forecast`, exactly as the
daemon does every cycle, and the job's predicted start and end are kept. When the sampled
job starts, the end predicted at that moment is kept too (start plus its expected iterations
at the per-iteration time of the placement it got). After the replay both are compared with
what happened.

What a forecast believes a job runs depends on the policy, as on a real cluster:

* A-SRPT and the other prediction-based policies: the predicted iterations, and for a job
  predicted 0 (unseen) its time limit (:func:`asrpt.sim.forecast.predicted_or_time_limit`,
  the daemon's rule);
* ``multifactor``: every job runs until its requested time limit
  (:func:`asrpt.sim.forecast.time_limit_belief`). With the multifactor policy that is what
  Slurm's own backfill reservations and ``squeue --start`` predict, through the same core.

Forecasting is done by wrapping the policy (:class:`ForecastSampler`): the engine is not
changed, and the wrapper's decisions are the wrapped policy's, so the replay is the same
with or without forecasts.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from asrpt.core.model import ClusterSnapshot, Decision, Job, Node, Partition, RunningJob
from asrpt.core.policies.base import Policy, PolicyState
from asrpt.core.speed import SpeedTable
from asrpt.sim.engine import SimResult, simulate
from asrpt.sim.forecast import forecast, predicted_or_time_limit, time_limit_belief
from asrpt.sim.predictors import SimPredictions

#: Jobs whose forecast is measured, at most (a seeded sample of the replay's jobs).
DEFAULT_SAMPLES = 200

#: belief name -> factory(snapshot, speed, alpha cache) -> expected iterations per job.
BELIEFS: dict[str, Callable[..., Callable[[Job], float]]] = {
    "predicted": predicted_or_time_limit,
    "time_limit": time_limit_belief,
}


def belief_for(policy_name: str) -> str:
    """What a forecast under ``policy_name`` believes jobs run (see the module doc)."""
    return "time_limit" if policy_name == "multifactor" else "predicted"


def sample_job_ids(jobs: Iterable[Job], samples: int, seed: int) -> set[str]:
    """A seeded sample of at most ``samples`` job ids (all of them when there are fewer)."""
    ids = sorted(job.job_id for job in jobs)
    if samples >= len(ids):
        return set(ids)
    return set(random.Random(seed).sample(ids, samples))


@dataclass(slots=True)
class _Sample:
    made_at_s: float
    start_s: float
    end_s: float
    end_at_start_s: float | None = None


class ForecastSampler:
    """A policy that decides exactly as ``policy`` does and forecasts the sampled jobs.

    At the first cycle that sees a sampled job pending (its submission), the forecast runs on
    that cycle's snapshot and the state the policy is about to decide with; when a sampled
    job is started, the end it is then expected to reach is noted.
    """

    def __init__(self, policy: Policy, job_ids: set[str], speed: SpeedTable, belief: str) -> None:
        if belief not in BELIEFS:
            raise ValueError(f"unknown belief {belief!r}; valid: {', '.join(BELIEFS)}")
        self.policy = policy
        self.name = policy.name
        self.job_ids = job_ids
        self.speed = speed
        self.belief = belief
        self.samples: dict[str, _Sample] = {}
        #: Wall time spent forecasting, seconds (not part of the policy's own cost).
        self.forecast_wall_s = 0.0
        self.forecasts = 0
        self._alpha_cache: dict[str, float] = {}

    def new_state(self) -> PolicyState:
        return self.policy.new_state()

    def restore_state(self, data: dict[str, Any]) -> PolicyState:
        return self.policy.restore_state(data)

    def expected(self, snapshot: ClusterSnapshot) -> Callable[[Job], float]:
        return BELIEFS[self.belief](snapshot, self.speed, self._alpha_cache)

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: PolicyState) -> Decision:
        arrived = [j for j in snapshot.pending if j.job_id in self.job_ids and j.job_id not in self.samples]
        if arrived:
            started = time.perf_counter()
            predicted = forecast(snapshot, now_s, self.policy, state.to_dict(), self.expected(snapshot))
            self.forecast_wall_s += time.perf_counter() - started
            self.forecasts += 1
            for job in arrived:
                f = predicted.get(job.job_id)
                self.samples[job.job_id] = _Sample(now_s, math.inf if f is None else f.start_s, math.inf if f is None else f.end_s)
        decision = self.policy.decide(snapshot, now_s, state)
        watched = [p for p in decision.starts if p.job_id in self.samples and self.samples[p.job_id].end_at_start_s is None]
        if watched:
            pending = {j.job_id: j for j in snapshot.pending}
            expected = self.expected(snapshot)
            for placement in watched:
                job = pending[placement.job_id]
                running = RunningJob(job=job, placement=placement, start_time_s=now_s)
                self.samples[placement.job_id].end_at_start_s = running.predicted_end_s(expected(job))
        return decision


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class ForecastAccuracy:
    """Errors of the forecasts made at submission (and of the end predicted at start)."""

    policy: str
    belief: str
    #: Sampled jobs whose forecast placed them (finite start and end), compared below.
    samples: int
    #: Sampled jobs the forecast could not place (no start predicted).
    unplaced: int
    median_abs_start_error_s: float | None
    median_abs_end_error_s: float | None
    p90_abs_start_error_s: float | None
    p90_abs_end_error_s: float | None
    #: The end predicted when the job started, against its real end: runtime prediction alone.
    median_abs_end_error_at_start_s: float | None
    #: Forecasts run, and the wall time they took in all.
    forecasts: int = 0
    forecast_wall_s: float = 0.0
    start_errors_s: tuple[float, ...] = field(default=(), repr=False)
    end_errors_s: tuple[float, ...] = field(default=(), repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The ``"forecast"`` block of ``asrpt simulate --forecast``'s JSON."""
        return {
            "median_abs_start_error_s": self.median_abs_start_error_s,
            "median_abs_end_error_s": self.median_abs_end_error_s,
            "p90_abs_start_error_s": self.p90_abs_start_error_s,
            "p90_abs_end_error_s": self.p90_abs_end_error_s,
            "median_abs_end_error_at_start_s": self.median_abs_end_error_at_start_s,
            "samples": self.samples,
            "unplaced": self.unplaced,
            "belief": self.belief,
            "forecasts": self.forecasts,
            "forecast_wall_s": self.forecast_wall_s,
        }


def compare_with_outcome(sampler: ForecastSampler, result: SimResult) -> ForecastAccuracy:
    """Each sampled job's forecast against what the replay then did."""
    start_errors: list[float] = []
    end_errors: list[float] = []
    at_start_errors: list[float] = []
    unplaced = 0
    for job_id in sorted(sampler.samples):
        sample = sampler.samples[job_id]
        record = result.records[job_id]
        if record.first_start_s is None or record.end_s is None:
            continue
        if sample.end_at_start_s is not None:
            at_start_errors.append(abs(sample.end_at_start_s - record.end_s))
        if not (math.isfinite(sample.start_s) and math.isfinite(sample.end_s)):
            unplaced += 1
            continue
        start_errors.append(abs(sample.start_s - record.first_start_s))
        end_errors.append(abs(sample.end_s - record.end_s))
    return ForecastAccuracy(
        policy=sampler.name,
        belief=sampler.belief,
        samples=len(start_errors),
        unplaced=unplaced,
        median_abs_start_error_s=_median(start_errors),
        median_abs_end_error_s=_median(end_errors),
        p90_abs_start_error_s=_p90(start_errors),
        p90_abs_end_error_s=_p90(end_errors),
        median_abs_end_error_at_start_s=_median(at_start_errors),
        forecasts=sampler.forecasts,
        forecast_wall_s=sampler.forecast_wall_s,
        start_errors_s=tuple(start_errors),
        end_errors_s=tuple(end_errors),
    )


def measure_forecasts(
    jobs: Sequence[Job],
    partitions: Sequence[Partition],
    nodes: Sequence[Node],
    policy: Policy,
    predictions: SimPredictions,
    *,
    speed: SpeedTable,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    belief: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    slurm_fills: bool = True,
) -> tuple[SimResult, ForecastAccuracy]:
    """Replay ``jobs`` under ``policy`` while forecasting a seeded sample of them at submission.

    Returns the replay (identical to :func:`asrpt.sim.engine.simulate` without forecasts) and
    the forecast errors.
    """
    sampler = ForecastSampler(policy, sample_job_ids(jobs, samples, seed), speed, belief or belief_for(policy.name))
    result = simulate(jobs, partitions, nodes, sampler, predictions, progress=progress, slurm_fills=slurm_fills)
    return result, compare_with_outcome(sampler, result)
