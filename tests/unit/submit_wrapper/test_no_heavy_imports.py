"""The wrapper runs on every submission: it must not import the scientific or database stack.

Checked two ways, both in fresh interpreters: the modules loaded by a whole run of ``main()``
(submission, record and all), and ``python -X importtime`` of the installed console script.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import pytest

from .wrapper_helpers import base_env, make_spool, wrapper_command

HEAVY = ("numpy", "scipy", "sklearn", "sqlalchemy", "networkx", "pandas", "matplotlib", "alembic", "apscheduler")
#: The only modules of ours a run may load.
OURS = {
    "asrpt",
    "asrpt.submit_wrapper",
    "asrpt.submit_wrapper.main",
    "asrpt.submit_wrapper.directives",
    "asrpt.submit_wrapper.config",
    "asrpt.submit_wrapper.spool",
    # shared with the daemon, light by the import contract: one rule for hints and escapes
    "asrpt.comment_hints",
    "asrpt.escaping",
}

_RUN = """
import sys
before = set(sys.modules)
from asrpt.submit_wrapper.main import main
rc = main(["asrpt-sbatch", "--parsable", sys.argv[1]])
with open(sys.argv[2], "w") as out:
    out.write("\\n".join(sorted(set(sys.modules) - before)))
sys.exit(rc)
"""


#: Standard modules the wrapper avoids on purpose: each costs milliseconds to import.
AVOIDED = {"json", "hashlib", "_hashlib", "typing", "dataclasses", "inspect", "logging", "subprocess", "pathlib", "tempfile"}


@pytest.mark.parametrize("config_file", ["absent", "plain", "needs-tomllib"])
def test_a_whole_run_loads_no_heavy_module(tmp_path, config_file):
    spool = make_spool(tmp_path / "spool")
    env = base_env(tmp_path, spool)
    if config_file == "plain":
        (tmp_path / "asrpt.toml").write_text('[wrapper]\nreal_sbatch = "/x"\n[daemon]\ninterval_s = 5\n')
    elif config_file == "needs-tomllib":
        (tmp_path / "asrpt.toml").write_text('[slurm]\naccelerator_gres = [\n  "gpu",\n]\n')
    else:
        env["ASRPT_CONFIG"] = str(tmp_path / "absent.toml")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#ASRPT model=m\ntrue\n")
    listing = tmp_path / "modules.txt"
    result = subprocess.run([sys.executable, "-c", _RUN, str(script), str(listing)], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert len(list(spool.glob("*.json"))) == 1  # the record path really ran
    loaded = set(listing.read_text().split())
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}
    assert {m for m in loaded if m.split(".")[0] == "asrpt"} <= OURS
    if config_file != "needs-tomllib":  # tomllib itself brings typing
        assert not (loaded & AVOIDED)
    # tomllib only for a file the quick reader does not vouch for
    assert ("tomllib" in loaded) is (config_file == "needs-tomllib")


def test_console_script_importtime_has_no_heavy_module(tmp_path):
    spool = make_spool(tmp_path / "spool")
    env = base_env(tmp_path, spool)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    # The installed launcher runs Python isolated, which ignores PYTHONPROFILEIMPORTTIME: run
    # its interpreter stage the same way, with -X importtime.
    command = wrapper_command()
    stage = Path(command[0]).with_name("asrpt-sbatch-python")
    if stage.exists():
        command = [sys.executable, "-I", "-X", "importtime", str(stage)]
    else:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    result = subprocess.run(command + [str(script)], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.decode().splitlines() if line.startswith("import time:")]
    assert "asrpt.submit_wrapper.main" in imported
    assert not [m for m in imported if m.split(".")[0] in HEAVY]
