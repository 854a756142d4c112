"""`asrpt bench cycle` runs the real decide step on a synthetic snapshot and reports timings
(the figures are read by people, not asserted: only the report's shape is checked here)."""

import json

from asrpt.cli.main import main


def test_bench_cycle_reports_every_phase(capsys):
    assert main(["bench", "cycle", "--pending", "200", "--running", "20", "--nodes", "30", "--repeat", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"cycle_s", "predict_s", "srpt_s", "placement_s"} <= set(report)
    assert report["pending"] == 200 and 0 < report["running"] <= 20
    assert all(report[k] > 0 for k in ("cycle_s", "predict_s", "srpt_s", "placement_s"))
