"""What a daemon cycle leaves for ``asrpt queue/eta/explain``: one forecast per job, made once."""

from __future__ import annotations

import math

import pytest

from asrpt.core.model import ClusterSnapshot, Decision
from asrpt.core.policies.asrpt import ASRPTState
from asrpt.core.srpt import VirtualSRPT
from asrpt.daemon import service
from asrpt.daemon.forecasts import forecast_records, virtual_work_s
from asrpt.sim.forecast import JobForecast
from tests.helpers import flat_job, partition_nodes

from .conftest import NOW_S


def test_a_cycle_stores_every_jobs_forecast_in_scheduling_order(daemon, monkeypatch) -> None:
    calls = []
    real = service.forecast

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "forecast", counting)
    decision = daemon.cycle()
    assert decision is not None
    assert len(calls) == 1, "the AdminComments and the stored rows share one forecast per cycle"
    assert daemon.backend.comments["101"].startswith("eta ")

    stored = daemon.repository.latest_forecasts()
    assert [f.slurm_job_id for f in stored][0] == "100"  # the running job first
    pending = [f for f in stored if not f.running]
    assert [f.slurm_job_id for f in pending] == [j for j in decision.order]
    assert [f.position for f in pending] == list(range(1, len(pending) + 1))
    by_id = {f.slurm_job_id: f for f in stored}
    assert by_id["100"].job_name == "bert-large" and by_id["100"].user == "bob" and by_id["100"].running
    assert by_id["100"].predicted_start_s == pytest.approx(NOW_S - 100)
    for job_id, f in by_id.items():
        live = daemon.stats.forecasts[job_id]
        assert f.predicted_end_s == pytest.approx(live.end_s)
        assert f.policy == "asrpt" and f.partition == "gpu" and f.partitions == ("gpu",)
        if not f.running:
            assert f.predicted_start_s == pytest.approx(live.start_s)
            assert f.reason == decision.reasons.get(job_id)
            assert f.virtual_size_s is not None
    assert by_id["103"].predicted_iterations == 50.0 and by_id["103"].expected_iterations == 50.0
    assert daemon.stats.forecast_made_at_s == NOW_S
    assert (daemon.stats.pending, daemon.stats.running) == (3, 1)
    assert {r.slurm_job_id for r in daemon.stats.forecast_rows} == set(by_id)


def test_a_storage_failure_does_not_fail_the_cycle(daemon, monkeypatch) -> None:
    from asrpt.exceptions import DatabaseUnavailable

    def broken(*args, **kwargs):
        raise DatabaseUnavailable("sqlite:///x", "disk full")

    monkeypatch.setattr(daemon.repository, "record_forecasts", broken)
    assert daemon.cycle() is not None
    assert daemon.stats.cycles == 1 and daemon.stats.forecast_failures == 1
    assert len(daemon.stats.forecast_rows) == 4  # the HTTP endpoint still has them


def test_rows_carry_holds_reasons_and_virtual_work() -> None:
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=4)
    a, b, c = flat_job("a", 2, 10.0, user="u"), flat_job("b", 2, 20.0, user=""), flat_job("c", 8, 5.0, user="u")
    snapshot = ClusterSnapshot(partitions=(partition,), nodes=nodes, pending=(a, b, c))
    decision = Decision(order=("b", "a"), holds=("b",), reasons={"b": "communication-heavy: held", "a": "waiting"})
    forecasts = {
        "a": JobForecast("a", NOW_S + 10, NOW_S + 20, False, "gpu"),
        "b": JobForecast("b", NOW_S + 30, NOW_S + 50, False, "gpu"),
        "c": JobForecast("c", math.inf, math.inf, False, None),
    }
    machine = VirtualSRPT()
    machine.release("a", 0.0, 5.0)
    machine.advance_to(1.0)
    state = ASRPTState(sizes_s={"a": 5.0, "b": 10.0}, queue=["b"])
    if hasattr(state, "machines"):  # virtual machines by pool
        state.machines["pool-x"] = machine
        state.pool_of.update({"a": "pool-x", "b": "pool-x"})
    else:
        state.machine = machine
    rows = forecast_records(
        snapshot, decision, forecasts, policy="asrpt", state=state, expected_iterations=lambda job: 2 * (job.predicted_iterations or 0),
        job_users={"b": "slurm-user"}, job_names={"a": "alpha"},
    )
    by_id = {r.slurm_job_id: r for r in rows}
    assert (by_id["b"].position, by_id["b"].held, by_id["b"].reason) == (1, True, "communication-heavy: held")
    assert (by_id["a"].position, by_id["a"].held, by_id["a"].job_name) == (2, False, "alpha")
    assert by_id["c"].position is None and by_id["c"].partition is None and by_id["c"].reason is None
    assert by_id["b"].user == "slurm-user"
    assert (by_id["b"].virtual_remaining_s, by_id["b"].virtual_size_s) == (0.0, 10.0)  # in Q: virtually done
    assert (by_id["a"].virtual_remaining_s, by_id["a"].virtual_size_s) == (4.0, 5.0)
    assert by_id["c"].virtual_remaining_s is None
    assert by_id["a"].expected_iterations == 20.0
    assert virtual_work_s(object(), ["a"]) == {}  # a policy without a virtual machine


def test_the_daemon_and_the_accuracy_replay_believe_the_same_runtimes(daemon) -> None:
    """The simulator measures forecast accuracy with ``predicted_or_time_limit``; it must be the
    daemon's own rule for what a job runs (a predicted 0 runs to its time limit)."""
    import dataclasses

    from asrpt.sim.forecast import predicted_or_time_limit

    snapshot = daemon.backend.snapshot()
    jobs = [*snapshot.pending, dataclasses.replace(snapshot.pending[0], predicted_iterations=0.0),
            dataclasses.replace(snapshot.pending[1], predicted_iterations=None, time_limit_s=None)]
    daemons = daemon._expected_iterations(snapshot)
    replays = predicted_or_time_limit(snapshot, daemon.speed)
    assert [daemons(j) for j in jobs] == pytest.approx([replays(j) for j in jobs])
    assert replays(jobs[-2]) == pytest.approx(900.0) and replays(jobs[-1]) == pytest.approx(3600.0)
