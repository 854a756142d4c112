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
