"""Completion scripts and man pages are generated from the parsers, so they know every option."""

import shutil
import subprocess

import pytest

from asrpt.cli.main import main


def _run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_bash_completion_parses_and_completes_the_new_options(capsys, tmp_path):
    script = _run(capsys, "completion", "bash")
    assert "--trace-format" in script and "--json-out" in script and "asrptd" in script
    path = tmp_path / "asrpt.bash"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    # complete `asrpt simulate --trace-f` in a real bash with the script loaded
    probe = (f"source {path}; COMP_WORDS=(asrpt simulate --trace-f); COMP_CWORD=2; "
             "_shtab_asrpt; printf '%s\\n' \"${COMPREPLY[@]}\"")
    reply = subprocess.run(["bash", "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    assert "--trace-format" in reply


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_parses(capsys, tmp_path):
    path = tmp_path / "_asrpt"
    path.write_text(_run(capsys, "completion", "zsh"))
    subprocess.run(["zsh", "-n", str(path)], check=True)


def test_zsh_completion_names_the_commands(capsys):
    script = _run(capsys, "completion", "zsh")
    assert "#compdef asrpt" in script and "--trace-format" in script


def test_man_pages_cover_every_command_and_render(capsys, tmp_path):
    assert main(["man", "--directory", str(tmp_path)]) == 0
    page = (tmp_path / "asrpt.1").read_text()
    assert page.startswith(".TH ASRPT")
    for option in ("--trace-format", "--json-out", "--seeds", "--states", "completion"):
        assert option.replace("-", "\\-") in page, option
    assert (tmp_path / "asrptd.1").read_text().startswith(".TH ASRPTD")
    if shutil.which("man"):
        shown = subprocess.run(["man", "-l", str(tmp_path / "asrpt.1")], check=True, capture_output=True, text=True,
                               env={"MANPAGER": "cat", "PATH": "/usr/bin:/bin", "MANWIDTH": "80"}).stdout
        assert "asrpt manual" in shown
