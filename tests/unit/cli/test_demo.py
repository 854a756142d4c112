"""``asrpt demo``, the README's first command: the bundled slice under every demo policy,
with the random forest (the default predictor of simulate and of the daemon)."""

import json

from asrpt.cli.main import main
from asrpt.cli.simulate import DEMO_POLICIES


def test_the_demo_replays_the_bundled_slice_under_every_policy_with_the_forest(tmp_path, capsys):
    plot, report = tmp_path / "demo.png", tmp_path / "demo.json"
    assert main(["demo", "--limit", "150", "--plot", str(plot), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "(predictor: rf)" in out
    for name in DEMO_POLICIES:
        assert f"\n{name} " in out
    assert plot.stat().st_size > 0
    assert json.loads(report.read_text())
