"""Two daemon rules the scheduling core does not see: ETA rewrite hysteresis, and raising the
prediction of a running job that outlives it."""

from __future__ import annotations

from asrpt.daemon.service import ETA_REWRITE_S
from tests.unit.daemon.conftest import NOW_S


def test_an_eta_that_drifted_less_than_the_threshold_is_not_rewritten(daemon) -> None:
    assert daemon.cycle() is not None
    first = dict(daemon.backend.comments)
    assert first["101"].startswith("eta start")
    daemon.clock.t_s += ETA_REWRITE_S / 3  # every forecast moves by 200 s: a different minute
    assert daemon.cycle() is not None
    assert daemon.stats.forecasts["101"].start_s - NOW_S >= ETA_REWRITE_S / 3
    assert daemon.backend.comments == first  # same texts: no scontrol write for a drift


def test_an_eta_that_moved_by_the_threshold_is_rewritten(daemon) -> None:
    assert daemon.cycle() is not None
    first = dict(daemon.backend.comments)
    daemon.clock.t_s += 2 * ETA_REWRITE_S
    assert daemon.cycle() is not None
    assert daemon.backend.comments["101"] != first["101"]


def test_a_running_job_past_its_prediction_gets_it_raised_and_stored(daemon) -> None:
    """Job 100 was predicted 1000 iterations at 1 s each and started 100 s ago; 2000 s later
    it has done 2100: the prediction is raised above that and stored, and its forecast end
    lies in the future rather than in the past."""
    daemon.clock.t_s += 2000.0
    assert daemon.cycle() is not None
    stored = daemon.repository.latest_predictions(["100"])["100"]
    assert stored.predicted_iterations > 2100.0
    assert daemon.stats.forecasts["100"].end_s > daemon.clock.t_s
