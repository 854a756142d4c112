"""`asrpt simulate --baseline-comm-heavy-hold` reaches every baseline's dispatcher."""

from __future__ import annotations

from asrpt.cli.main import build_parser


def test_baseline_hold_flag_is_parsed_and_off_by_default(monkeypatch):
    import asrpt.cli.simulate as simulate

    seen = {}

    def fake_compare(**kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(simulate, "compare", fake_compare)
    parser = build_parser()
    base = ["simulate", "--trace", "t.csv", "--format", "pai", "--cluster", "pai", "--tau", "0.2"]
    for extra, expected in (([], False), (["--baseline-comm-heavy-hold"], True)):
        args = parser.parse_args(base + extra)
        try:
            simulate.run_simulate(args)
        except SystemExit:
            pass
        assert seen["baseline_comm_heavy_hold"] is expected
        assert seen["options"].dispatch.comm_heavy_tau == 0.2


def test_rf_is_the_default_predictor_and_its_rules_reach_make_predictions(monkeypatch):
    import asrpt.cli.simulate as simulate
    from asrpt.core.prediction import DEFAULT_RF_ESTIMATE, DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE

    seen = {}

    def fake_compare(**kwargs):
        seen.clear()
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(simulate, "compare", fake_compare)
    parser = build_parser()
    base = ["simulate", "--trace", "t.csv", "--format", "pai", "--cluster", "pai"]
    cases = (
        ([], (DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE, DEFAULT_RF_ESTIMATE), True),
        (["--rf-unseen-policy", "zero", "--rf-unseen-reference", "history", "--rf-estimate", "mean",
          "--no-time-limit-cap"], ("zero", "history", "mean"), False),
    )
    for extra, (unseen, reference, estimate), cap in cases:
        try:
            simulate.run_simulate(parser.parse_args(base + extra))
        except SystemExit:
            pass
        assert seen["predictor"] == "rf"
        assert seen["predictor_options"] == {
            "rf_unseen_policy": unseen, "rf_unseen_reference": reference, "rf_estimate": estimate,
        }
        assert seen["options"].time_limit_cap is cap
