"""Bad command-line values are usage errors at once (exit 2, one line naming the option and
what is valid), never a traceback, and never after a long run."""

from __future__ import annotations

import pytest

from asrpt.cli.main import main as asrpt_main
from asrpt.daemon.main import main as asrptd_main

MISSING = "/nonexistent-asrpt-dir/out"


def _usage_error(capsys, run, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--plot", f"{MISSING}.png"],
        ["demo", "--json", f"{MISSING}.json"],
        ["simulate", "--trace", "t.csv", "--format", "pai", "--cluster", "pai", "--plot", f"{MISSING}.png"],
        ["simulate", "--trace", "t.csv", "--format", "pai", "--cluster", "pai", "--json", f"{MISSING}.json"],
        ["simulate", "--trace", "t.csv", "--format", "pai", "--cluster", "pai", "--jobs", f"{MISSING}.csv"],
        ["serving", "route-sim", "--trace", "t.csv", "--fit", "f.json", "--plot", f"{MISSING}.png"],
        ["serving", "route-sim", "--trace", "t.csv", "--fit", "f.json", "--json", f"{MISSING}.json"],
        ["serving", "route-sim", "--trace", "t.csv", "--fit", "f.json", "--table", f"{MISSING}.md"],
        ["bench", "policies", "--json", f"{MISSING}.json"],
    ],
)
def test_an_output_into_a_missing_directory_fails_before_the_run(capsys, monkeypatch, argv):
    import asrpt.cli.simulate as simulate

    def no_run(**_kwargs):
        raise AssertionError("the run started although its output cannot be written")

    monkeypatch.setattr(simulate, "compare", no_run)
    err = _usage_error(capsys, asrpt_main, argv)
    assert "/nonexistent-asrpt-dir" in err and "does not exist" in err


def test_an_output_that_is_a_directory_is_a_usage_error(capsys, tmp_path):
    err = _usage_error(capsys, asrpt_main, ["demo", "--plot", str(tmp_path)])
    assert str(tmp_path) in err and "is a directory" in err


@pytest.mark.parametrize("option", ["--pending", "--running", "--nodes", "--repeat"])
def test_bench_cycle_rejects_negative_sizes(capsys, option):
    err = _usage_error(capsys, asrpt_main, ["bench", "cycle", option, "-5"])
    assert option in err and "-5" in err


def test_bench_cycle_names_the_valid_policies(capsys):
    err = _usage_error(capsys, asrpt_main, ["bench", "cycle", "--policy", "foo"])
    assert "'foo'" in err and "asrpt" in err and "multifactor" in err


def test_asrptd_log_level_names_the_valid_levels(capsys):
    err = _usage_error(capsys, asrptd_main, ["--log-level", "foo"])
    assert "foo" in err and "DEBUG" in err and "WARNING" in err


def test_asrptd_log_level_from_the_environment_is_checked_too(capsys, monkeypatch):
    monkeypatch.setenv("ASRPT_LOG_LEVEL", "chatty")
    err = _usage_error(capsys, asrptd_main, [])
    assert "chatty" in err and "INFO" in err
