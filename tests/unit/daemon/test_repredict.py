"""After a retrain the daemon predicts its pending jobs again; running jobs keep theirs."""

from __future__ import annotations


def test_a_retrain_re_predicts_pending_jobs_not_running_ones(daemon, monkeypatch) -> None:
    ids = ["100", "101", "102", "103"]
    daemon.cycle()
    before = {j: p.predicted_iterations for j, p in daemon.repository.latest_predictions(ids).items()}
    assert before == {"100": 1000.0, "101": 300.0, "102": 2000.0, "103": 50.0}
    asked: list[list[str]] = []

    def new_model(rows):
        asked.append([r.slurm_job_id for r in rows])
        return [7.0] * len(rows)

    monkeypatch.setattr(daemon.enrichment, "predict", new_model)
    monkeypatch.setattr(daemon.predictor, "retrain", lambda now_s: 0)
    daemon.retrain()  # learnt nothing: nothing is re-predicted
    daemon.cycle()
    assert asked == []
    monkeypatch.setattr(daemon.predictor, "retrain", lambda now_s: 50)
    daemon.retrain()
    daemon.cycle()
    after = {j: p.predicted_iterations for j, p in daemon.repository.latest_predictions(ids).items()}
    assert sorted(asked[0]) == ["101", "102", "103"]
    assert after == {"100": 1000.0, "101": 7.0, "102": 7.0, "103": 7.0}
    daemon.cycle()  # once per retrain, not every cycle
    assert len(asked) == 1
