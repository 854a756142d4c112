"""``asrpt serving fit | plan | route-sim`` end to end on small synthetic inputs."""

import argparse
import json
import subprocess
import sys

import pytest

from asrpt.cli import serving_commands
from asrpt.cli.serving_commands import add_serving_parser
from asrpt.exceptions import AsrptError
from asrpt.serving.errors import ClusterSpecError, UnknownModel

from tests.serving.helpers import write_azure_trace, write_splitwise_profile


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="asrpt")
    add_serving_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture()
def fit_json(tmp_path):
    a100 = write_splitwise_profile(tmp_path / "a100.csv", hardware="a100-80gb", scale=1.0)
    h100 = write_splitwise_profile(tmp_path / "h100.csv", hardware="h100-80gb", scale=0.5, seed=1)
    out = tmp_path / "fit.json"
    assert run(["serving", "fit", "--profile", str(a100), "--profile", str(h100), "--format", "splitwise",
                "--json", str(out)]) == 0
    return out


def test_fit_writes_the_promised_document(fit_json):
    document = json.loads(fit_json.read_text())
    assert set(document["fits"]) == {"llama2-70b/a100-80gb/tp2", "llama2-70b/h100-80gb/tp2"}
    entry = document["fits"]["llama2-70b/a100-80gb/tp2"]
    for phase in ("prefill", "decode"):
        assert set(entry[phase]["coefficients"]) >= {"intercept_ms", "per_request_ms"}
        assert 0 <= entry[phase]["heldout_median_ape"] < 0.05  # 1 % noise on an exactly linear truth
    assert entry["prefill"]["coefficients"]["per_prompt_token_ms"] == pytest.approx(0.2, rel=0.1)
    assert len(document["files"]) == 2


def test_plan_writes_ranked_candidates(fit_json, tmp_path):
    trace = write_azure_trace(tmp_path / "trace.csv")
    out = tmp_path / "plan.json"
    assert run(["serving", "plan", "--model", "llama2-70b", "--cluster", "a100x4+h100x4", "--fit", str(fit_json),
                "--trace", str(trace), "--json", str(out), "--no-check", "--sample-requests", "100"]) == 0
    plan = json.loads(out.read_text())
    assert [m["best_tp"] for m in plan["machines"]] == [2, 2]  # only TP2 was profiled; TP4 uses no pooled fit
    tp1 = next(c for c in plan["machines"][0]["candidates"] if c["tp"] == 1)
    assert not tp1["feasible"] and "weights" in tp1["reason"]


def test_route_sim_writes_json_table_and_plot(fit_json, tmp_path):
    trace = write_azure_trace(tmp_path / "trace.csv", count=300)
    out, table, plot = tmp_path / "route.json", tmp_path / "route.md", tmp_path / "route.png"
    assert run(["serving", "route-sim", "--trace", str(trace), "--fit", str(fit_json), "--policy", "kv-aware",
                "--policy", "round-robin", "--rates", "1,inf", "--requests", "60", "--seeds", "0",
                "--json", str(out), "--table", str(table), "--plot", str(plot)]) == 0
    report = json.loads(out.read_text())
    assert report["rates"] == ["1", "inf"]
    assert set(report["policies"]) == {"kv-aware", "round-robin"}
    assert set(report["policies"]["kv-aware"]["inf"]) >= {"throughput_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"}
    assert [i["hardware"] for i in report["instances"]] == ["a100-80gb", "h100-80gb"]  # default: one per fitted type
    assert "| inf | kv-aware |" in table.read_text()
    assert plot.stat().st_size > 1000


@pytest.mark.parametrize("argv, error", [
    (["--model", "gpt-5", "--cluster", "a100x8"], UnknownModel),
    (["--model", "llama2-70b", "--cluster", "eight a100s"], ClusterSpecError),
])
def test_plan_errors_are_asrpt_errors(fit_json, tmp_path, argv, error):
    trace = write_azure_trace(tmp_path / "trace.csv")
    with pytest.raises(error):
        run(["serving", "plan", *argv, "--fit", str(fit_json), "--trace", str(trace), "--json", str(tmp_path / "o.json")])


def test_missing_profile_file_is_an_asrpt_error(tmp_path):
    with pytest.raises(AsrptError, match="cannot read"):
        run(["serving", "fit", "--profile", str(tmp_path / "nope.csv"), "--format", "splitwise", "--json", str(tmp_path / "o.json")])


def test_registered_in_the_asrpt_entry_point_when_wired(fit_json, tmp_path, capsys):
    from asrpt.cli import main

    try:
        main.build_parser().parse_args(["serving", "fit", "--help"])
    except SystemExit:
        pass
    if "serving" not in capsys.readouterr().out:
        pytest.skip("asrpt.cli.main does not register serving_commands yet")
    code = main.main(["serving", "plan", "--model", "gpt-5", "--cluster", "a100x8", "--fit", str(fit_json),
                      "--trace", str(tmp_path / "t.csv"), "--json-out", str(tmp_path / "o.json")])
    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_literal_registries_match_the_real_ones():
    from asrpt.serving.experiment import OUTPUT_PREDICTORS
    from asrpt.serving.profiles import PROFILE_FORMATS
    from asrpt.serving.router import POLICY_NAMES

    assert serving_commands.PROFILE_FORMATS == PROFILE_FORMATS
    assert serving_commands.POLICY_NAMES == POLICY_NAMES
    assert serving_commands.OUTPUT_PREDICTORS == OUTPUT_PREDICTORS


def test_building_the_serving_parser_imports_nothing_heavy():
    code = ("import sys, argparse; from asrpt.cli.serving_commands import add_serving_parser; "
            "add_serving_parser(argparse.ArgumentParser().add_subparsers()); "
            "print(','.join(m for m in ('numpy', 'scipy', 'matplotlib', 'sklearn') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == ""
