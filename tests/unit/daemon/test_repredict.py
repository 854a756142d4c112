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


def test_a_retrain_with_no_new_finished_job_learns_nothing(daemon) -> None:
    """The same rows give the same forest: no refit, and nothing to re-predict."""
    from asrpt.daemon.model import DaemonPredictor
    from asrpt.db.repository import OutcomeRecord, SubmissionRecord

    def finish(i: int) -> None:
        job_id = f"9{i:03d}"
        daemon.repository.record_submission(SubmissionRecord(
            slurm_job_id=job_id, user="alice", submit_time_s=1000.0 + i, source="wrapper", job_name=f"train{i % 3}"))
        daemon.repository.record_outcome(OutcomeRecord(
            slurm_job_id=job_id, start_time_s=1100.0 + i, end_time_s=2000.0 + i, exit_state="COMPLETED",
            iterations=100.0 * (1 + i % 5)))

    for i in range(25):
        finish(i)
    predictor = DaemonPredictor(daemon.repository, min_rows=20)
    assert predictor.retrain(3000.0) == 25
    model, version = predictor.model, predictor.version
    assert predictor.retrain(3600.0) == 0
    assert predictor.model is model and predictor.version == version
    finish(25)
    assert predictor.retrain(4200.0) == 26 and predictor.model is not model
