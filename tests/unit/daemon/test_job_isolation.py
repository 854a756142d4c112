"""Issue 16: one job whose data cannot be used is scheduled as an ordinary job, with the
reason in ``asrpt explain`` and a counter; the cycle goes on for everybody else."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.core.model import ParallelConfig
from asrpt.daemon.http import render_metrics
from asrpt.daemon.service import format_eta
from asrpt.db.repository import SubmissionRecord
from asrpt.sim.forecast import JobForecast
from tests.unit.daemon.conftest import NOW_S


def _replace_pending(daemon, job_id: str, **changes) -> None:
    snapshot = daemon.backend._snapshot
    pending = tuple(dataclasses.replace(j, **changes) if j.job_id == job_id else j for j in snapshot.pending)
    daemon.backend._snapshot = dataclasses.replace(snapshot, pending=pending)


def _reason(daemon, job_id: str) -> str:
    rows = {row.slurm_job_id: row for row in daemon.stats.forecast_rows}
    return rows[job_id].reason or ""


def _isolated_metric(daemon) -> int:
    line = next(l for l in render_metrics(daemon, None).splitlines() if l.startswith("asrpt_jobs_isolated_total "))
    return int(float(line.split()[1]))


def test_an_unknown_class_from_asrpt_directive_is_scheduled_as_the_default_class(daemon) -> None:
    # #ASRPT class=zzz: the wrapper's record carries it into the history.
    daemon.repository.record_submission(
        SubmissionRecord(slurm_job_id="101", user="alice", submit_time_s=NOW_S - 50, source="wrapper", workload_class="zzz")
    )
    decision = daemon.cycle()
    assert decision is not None and "101" in decision.order
    assert "workload class 'zzz' is unknown" in _reason(daemon, "101")
    assert daemon.stats.jobs_isolated == 1 and _isolated_metric(daemon) == 1
    assert daemon.cycle() is not None
    assert daemon.stats.jobs_isolated == 1  # counted once per job, not once per cycle


def test_an_unknown_class_from_the_comment_is_scheduled_as_the_default_class(daemon) -> None:
    # --comment asrpt:class=bert2: the backend puts it on the job itself.
    _replace_pending(daemon, "102", workload_class="bert2")
    decision = daemon.cycle()
    assert decision is not None and "102" in decision.order
    assert "workload class 'bert2' is unknown" in _reason(daemon, "102")


def test_a_job_with_unusable_data_warns_once_not_every_cycle(daemon, caplog) -> None:
    _replace_pending(daemon, "102", workload_class="bert2")
    with caplog.at_level("WARNING", logger="asrpt.daemon.enrich"):
        for _ in range(3):
            assert daemon.cycle() is not None
    warned = [r for r in caplog.records if "workload class 'bert2' is unknown" in r.getMessage()]
    assert len(warned) == 1
    assert "workload class 'bert2' is unknown" in _reason(daemon, "102")  # explain still says why


def test_huge_micro_batches_and_an_eta_beyond_the_calendar(daemon) -> None:
    # --comment asrpt:mb=1e25 with #ASRPT iterations=1000.
    _replace_pending(daemon, "103", parallel=ParallelConfig(data=2, micro_batches=10**25))
    decision = daemon.cycle()
    assert decision is not None and "103" in decision.order
    assert "micro-batches" in _reason(daemon, "103")


def test_format_eta_beyond_the_calendar_gives_no_text() -> None:
    far = JobForecast(job_id="1", start_s=NOW_S, end_s=1e20, running=False)
    assert format_eta(far, NOW_S) is None


def test_format_eta_says_the_end_is_unknown_when_nothing_bounds_it() -> None:
    """A job with no prediction and no time limit has no end to forecast: the text says so
    instead of dropping the start the forecast does know (or inventing an end)."""
    unbounded = JobForecast(job_id="1", start_s=NOW_S, end_s=math.inf, running=False)
    start = datetime.fromtimestamp(NOW_S, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    assert format_eta(unbounded, NOW_S) == f"eta start {start} end unknown"
    assert format_eta(JobForecast(job_id="1", start_s=NOW_S, end_s=math.inf, running=True), NOW_S) == "eta end unknown"
    assert format_eta(JobForecast(job_id="1", start_s=math.inf, end_s=math.inf, running=False), NOW_S) is None


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"submit_time_s": 1e18}, "submit time"),
        ({"submit_time_s": math.nan}, "submit time"),
        ({"time_limit_s": 1e300}, "time limit"),
        ({"predicted_iterations": math.inf}, "predicted iterations"),
    ],
)
def test_impossible_times_from_squeue_are_isolated(daemon, changes, words) -> None:
    _replace_pending(daemon, "101", **changes)
    daemon.enrichment.forget("101")
    decision = daemon.cycle()
    assert decision is not None and "101" in decision.order
    assert words in _reason(daemon, "101")


def test_a_job_name_longer_than_the_column_is_shortened_not_refused(daemon) -> None:
    daemon.backend.jobs["104"] = dataclasses.replace(daemon.backend.jobs["103"], job_id="104", name="x" * 300)
    snapshot = daemon.backend._snapshot
    extra = dataclasses.replace(snapshot.pending[-1], job_id="104")
    daemon.backend._snapshot = dataclasses.replace(snapshot, pending=(*snapshot.pending, extra))
    assert daemon.cycle() is not None
    stored = daemon.repository.get_submission("104")
    assert stored is not None and stored.job_name is not None and len(stored.job_name) <= 256


def test_a_job_the_history_cannot_store_is_scheduled_without_it(daemon, monkeypatch) -> None:
    # What PostgreSQL's DataError (a value too long for its column) does to one job's row.
    real = daemon.repository.record_submission

    def record_submission(record, **kw):
        if record.slurm_job_id == "104":
            raise ValueError("value too long for type character varying(256)")
        return real(record, **kw)

    monkeypatch.setattr(daemon.repository, "record_submission", record_submission)
    daemon.backend.jobs["104"] = dataclasses.replace(daemon.backend.jobs["103"], job_id="104")
    snapshot = daemon.backend._snapshot
    daemon.backend._snapshot = dataclasses.replace(snapshot, pending=(*snapshot.pending, dataclasses.replace(snapshot.pending[-1], job_id="104")))
    decision = daemon.cycle()
    assert decision is not None and "104" in decision.order
    assert "value too long" in _reason(daemon, "104")
    assert daemon.stats.jobs_isolated == 1


_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**80), max_value=2**80).map(float),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    submit_time_s=_numbers,
    time_limit_s=st.one_of(st.none(), _numbers),
    predicted=st.one_of(st.none(), _numbers),
    workload_class=st.text(max_size=300),
    micro_batches=st.integers(min_value=1, max_value=2**90),
    user=st.text(max_size=50),
    hinted_class=st.one_of(st.none(), st.text(min_size=1, max_size=128)),
)
def test_a_cycle_never_raises_because_of_one_jobs_data(
    daemon, submit_time_s, time_limit_s, predicted, workload_class, micro_batches, user, hinted_class
) -> None:
    """Whatever one job's fields hold, the cycle decides for everyone (that job included)."""
    if hinted_class is not None:
        daemon.repository.record_submission(
            SubmissionRecord(slurm_job_id="101", user="alice", submit_time_s=NOW_S - 50, source="wrapper", workload_class=hinted_class)
        )
    _replace_pending(
        daemon, "101", submit_time_s=submit_time_s, time_limit_s=time_limit_s, predicted_iterations=predicted,
        workload_class=workload_class, parallel=ParallelConfig(data=8, micro_batches=micro_batches), user=user,
    )
    daemon.enrichment.forget("101")
    decision = daemon.cycle()
    assert decision is not None, daemon.stats.last_error
    assert {"101", "102", "103"} <= set(decision.order) | {p.job_id for p in decision.starts}


def test_a_nul_in_a_job_name_is_dropped_before_the_history(daemon) -> None:
    # PostgreSQL refuses NUL in text; squeue passes whatever the user wrote.
    daemon.backend.jobs["104"] = dataclasses.replace(daemon.backend.jobs["103"], job_id="104", name="a\x00b")
    snapshot = daemon.backend._snapshot
    daemon.backend._snapshot = dataclasses.replace(snapshot, pending=(*snapshot.pending, dataclasses.replace(snapshot.pending[-1], job_id="104")))
    assert daemon.cycle() is not None
    assert daemon.repository.get_submission("104").job_name == "ab"


def test_the_backends_iteration_time_hook_accepts_an_unknown_class(daemon) -> None:
    # The CLI backend asks for a running job's per-iteration time while reading squeue, with
    # the class from --comment asrpt:class=bert2 (found on real Slurm: KeyError every cycle).
    snapshot = daemon.backend._snapshot
    running = snapshot.running[0]
    job = dataclasses.replace(running.job, workload_class="bert2")
    alpha_s = daemon._iteration_time_s(job, running.placement.worker_nodes, snapshot.partitions[0])
    assert math.isfinite(alpha_s) and alpha_s > 0


@pytest.mark.postgres
def test_on_postgresql_a_long_or_nul_job_name_neither_fails_the_cycle_nor_loses_the_row(tmp_path) -> None:
    """PostgreSQL raises DataError for a name over String(256) and refuses NUL in text."""
    import os

    from asrpt.daemon.config import DaemonConfig, SpoolSection
    from asrpt.daemon.service import Daemon
    from asrpt.db.migrate import upgrade
    from asrpt.db.repository import HistoryRepository
    from asrpt.db.session import make_engine
    from tests.db.conftest import _wipe_postgres
    from tests.helpers import flat_speed_table
    from tests.unit.daemon.conftest import FakeSlurm, ManualClock, _cluster

    url = os.environ.get("ASRPT_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("ASRPT_TEST_POSTGRES_URL is not set (contrib/ci/start-postgres.sh starts a server)")
    engine = make_engine(url)
    _wipe_postgres(engine)
    engine.dispose()
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    snapshot, jobs = _cluster()
    jobs["101"] = dataclasses.replace(jobs["101"], name="x" * 300)
    jobs["102"] = dataclasses.replace(jobs["102"], name="a\x00b")
    # A directory's user name beyond the 128-character user columns (the names were cut at
    # 256 in one place and 128 in another, and not at all on the way to the forecasts).
    long_user = "u" * 200
    jobs["103"] = dataclasses.replace(jobs["103"], user=long_user)
    snapshot = dataclasses.replace(snapshot, pending=tuple(
        dataclasses.replace(j, user=long_user) if j.job_id == "103" else j for j in snapshot.pending))
    (tmp_path / "spool").mkdir()
    backend = FakeSlurm(snapshot, jobs)
    daemon = Daemon(DaemonConfig(spool=SpoolSection(dir=str(tmp_path / "spool"))), repository=repository, backend=backend,
                    clock=ManualClock(NOW_S), speed=flat_speed_table())  # type: ignore[arg-type]
    backend.admin_comment = daemon._admin_comment
    try:
        assert daemon.cycle() is not None, daemon.stats.last_error
        assert daemon.stats.forecast_failures == 0
        assert repository.get_submission("101").job_name == "x" * 256
        assert repository.get_submission("102").job_name == "ab"
        assert repository.get_submission("103").user == "u" * 128
        assert repository.forecast_for("103").user == "u" * 128
    finally:
        repository.close()


def test_one_finished_job_with_impossible_times_does_not_stop_the_outcome_sync(daemon) -> None:
    from asrpt.slurm.records import FinishedJob

    bad = FinishedJob(job_id="100", user="bob", state="COMPLETED", end_time_s=1e20, start_time_s=1e19, nodes=("gpu-000",))
    good = FinishedJob(job_id="101", user="alice", state="COMPLETED", end_time_s=NOW_S, start_time_s=NOW_S - 60, nodes=("gpu-001",))
    daemon.backend.finished_jobs = lambda since_s: (bad, good)
    assert daemon.sync_finished() == 1
    assert daemon._last_sync_s == NOW_S  # the bad end time does not push the sync past every later job
    rows = {r.job_id: r for r in daemon.repository.history_rows(finished_only=True)}
    assert "101" in rows and "100" not in rows


class _FailsOn:
    """The real policy, except that it raises on a job whose prediction is ``poison``."""

    def __init__(self, policy, poison: float, error: Exception) -> None:
        self.policy, self.poison, self.error = policy, poison, error

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def decide(self, snapshot, now_s, state):
        if any(job.predicted_iterations == self.poison for job in snapshot.pending):
            raise self.error
        return self.policy.decide(snapshot, now_s, state)


def test_a_policy_error_on_one_jobs_data_isolates_that_job(daemon) -> None:
    """Job 101 (predicted 300 iterations) makes the policy raise: the cycle finds it, schedules
    it as an ordinary job and decides for everyone."""
    daemon.loop.policy.policy = _FailsOn(daemon.policy, 300.0, ZeroDivisionError("division by zero"))
    decision = daemon.cycle()
    assert decision is not None, daemon.stats.last_error
    assert {"101", "102", "103"} <= set(decision.order)
    assert "the policy failed on this job's data (ZeroDivisionError" in _reason(daemon, "101")
    assert "scheduled as an ordinary job" in _reason(daemon, "101")
    assert daemon.stats.jobs_isolated == 1 and daemon.stats.escaped == 0


def test_a_policy_error_no_single_job_explains_fails_the_cycle_and_keeps_the_state(daemon) -> None:
    assert daemon.cycle() is not None
    saved = daemon.loop.state.to_dict()

    class Always:
        def __getattr__(self, name):
            return getattr(daemon.policy, name)

        def decide(self, snapshot, now_s, state):
            raise RuntimeError("broken for everyone")

    daemon.loop.policy.policy = Always()
    assert daemon.cycle() is None and daemon.stats.escaped == 1
    assert daemon.loop.state.to_dict() == saved


def test_format_eta_of_a_job_of_unknown_length_is_a_bound() -> None:
    at = datetime.fromtimestamp(NOW_S + 600, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    bound = JobForecast(job_id="1", start_s=NOW_S, end_s=NOW_S + 600, running=True, end_unknown=True)
    assert format_eta(bound, NOW_S) == f"eta end unknown, at most {at}"


def test_a_running_job_with_no_history_shows_unknown_at_most_its_limit_never_a_past_end(daemon) -> None:
    """Predicted 0 (no history): each cycle doubles it as it runs, which keeps the order
    honest but forecasts nothing. Its end is "unknown, at most" start + limit, cycle after cycle."""
    snapshot = daemon.backend._snapshot
    run = snapshot.running[0]
    unseen = dataclasses.replace(run, job=dataclasses.replace(run.job, time_limit_s=7200.0))
    daemon.backend._snapshot = dataclasses.replace(snapshot, running=(unseen,))
    daemon.repository.record_prediction("100", predicted_iterations=0.0, model_version="test", made_at_s=NOW_S)
    limit_end_s = run.start_time_s + 7200.0
    for step_s in (0.0, 300.0, 1200.0, 3000.0):
        daemon.clock.t_s = NOW_S + step_s
        assert daemon.cycle() is not None
        row = {r.slurm_job_id: r for r in daemon.stats.forecast_rows}["100"]
        assert row.end_unknown and row.predicted_end_s == pytest.approx(limit_end_s)
        assert row.predicted_end_s >= daemon.clock.t_s
        assert daemon.backend.comments["100"].startswith("eta end unknown, at most ")
    known = {r.slurm_job_id: r for r in daemon.stats.forecast_rows}["101"]
    assert not known.end_unknown
