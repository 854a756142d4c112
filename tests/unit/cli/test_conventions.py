"""One spelling per meaning (``--json``/``--json-out``, ``--trace-format``, ``--seeds``); the old
spellings still parse to the same values and warn on stderr naming the new one."""

import json

import pytest

from asrpt.cli.main import build_parser, main

SIM = ["simulate", "--trace", "t.csv", "--cluster", "pai"]


def test_new_and_old_trace_format_and_seed_spellings_parse_alike(capsys):
    new = build_parser().parse_args([*SIM, "--trace-format", "philly", "--seeds", "0,3"])
    assert capsys.readouterr().err == ""
    old = build_parser().parse_args([*SIM, "--format", "philly", "--seed", "0", "--seed", "3"])
    err = capsys.readouterr().err
    assert (old.fmt, old.seeds) == (new.fmt, new.seeds) == ("philly", [0, 3])
    assert "--format FORMAT is deprecated; use --trace-format" in err
    assert "--seed N is deprecated; use --seeds" in err


def test_one_seed_is_a_list_of_one_and_a_bad_seed_names_itself(capsys):
    assert build_parser().parse_args([*SIM, "--trace-format", "pai", "--seeds", "7"]).seeds == [7]
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SIM, "--trace-format", "pai", "--seeds", "1,x"])
    assert "'x' is not an integer" in capsys.readouterr().err


def test_old_trace_format_is_still_checked_against_the_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SIM, "--format", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_missing_trace_format_is_a_clear_error(capsys):
    assert main([*SIM]) == 2
    assert "--trace-format is required" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["demo"], [*SIM, "--trace-format", "pai"], ["predict", "evaluate", "--trace", "t.csv"],
    ["serving", "route-sim", "--trace", "t.csv", "--fit", "f.json"], ["bench", "policies"],
])
def test_json_is_a_flag_and_json_path_the_old_spelling_of_json_out(command, tmp_path, capsys):
    flag = build_parser().parse_args([*command, "--json"])
    assert (flag.json, flag.json_out) == (True, None)
    new = build_parser().parse_args([*command, "--json-out", str(tmp_path / "a.json")])
    assert capsys.readouterr().err == ""
    old = build_parser().parse_args([*command, "--json", str(tmp_path / "a.json")])
    assert (old.json, old.json_out) == (False, new.json_out)
    assert "--json PATH is deprecated; use --json-out PATH" in capsys.readouterr().err


def test_predict_evaluate_json_flag_prints_only_json_on_stdout(tmp_path, capsys):
    head = tmp_path / "head.csv"
    from pathlib import Path

    lines = Path("src/asrpt/data/traces/pai_slice.csv").read_text(encoding="utf-8").splitlines()[:400]
    head.write_text("\n".join(lines) + "\n")
    assert main(["predict", "evaluate", "--trace", str(head), "--retrain-every", "0", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["trace"] == str(head)
    assert captured.err.strip()  # the table went to stderr, out of the JSON's way
