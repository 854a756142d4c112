"""asrpt-sbatch against a real Slurm: the user sees exactly what plain sbatch would show.

For each argument form, plain sbatch and the wrapper run with the same arguments, environment,
working directory and stdin; their stdout and stderr (job ids and times masked) and exit
statuses must be equal. Every successful submission must leave one record with the job id
sbatch printed, which ingest accepts because Slurm reports the same user as the file owner.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asrpt.ingest.wrapper_spool import accept_record, read_spool, remove
from asrpt.submit_wrapper.main import parse_job_id

from .conftest import LocalCluster

pytestmark = pytest.mark.slurm

SCRIPT = """#!/bin/sh
#SBATCH --job-name=wrapped -o /dev/null
#SBATCH --time=5
#ASRPT model=resnet50 class=resnet50 parallel=1x1x1 iterations=100
true
"""

# (name, arguments, stdin: None, or "script" for the job script on a pipe)
CASES = [
    ("plain script", ["{script}"], None),
    ("parsable", ["--parsable", "{script}"], None),
    ("wrap", ["-o", "/dev/null", "--wrap", "true"], None),
    ("test-only", ["--test-only", "{script}"], None),
    ("array", ["--array=0-2", "--hold", "{script}"], None),
    ("hold", ["--hold", "{script}"], None),
    ("stdin script", ["--hold"], "script"),
    ("stdin script parsable", ["--hold", "--parsable", "-J", "from-stdin"], "script"),
    ("quiet", ["-Q", "--hold", "{script}"], None),
    ("heterogeneous", ["--hold", "-p", "gpu", ":", "-p", "npu", "{script}"], None),
    ("script arguments", ["--hold", "{script}", "--lr", "3e-4"], None),
    ("wait", ["--wait", "-o", "/dev/null", "--wrap", "exit 3"], None),
    ("invalid option", ["--no-such-option", "{script}"], None),
    ("invalid partition", ["-p", "nope", "{script}"], None),
    ("missing script", ["/nonexistent/job.sh"], None),
    ("not a batch script", ["{not_batch}"], None),
    ("wrap with script", ["--wrap", "true", "{script}"], None),
]


def normalise(output: bytes) -> bytes:
    """Mask what differs between two submissions: job ids and start-time estimates."""
    output = re.sub(rb"([Jj]ob )[0-9]+", rb"\1N", output)
    output = re.sub(rb"(?m)^[0-9]+(;|$)", rb"N\1", output)
    output = re.sub(rb"to start at \S+ using [0-9]+ processors on nodes \S+", b"to start at T using P processors on nodes X", output)
    return output


@pytest.fixture
def setup(cluster: LocalCluster, tmp_path: Path):
    real = shutil.which("sbatch", path="/usr/bin:/usr/local/bin:/bin")
    assert real is not None
    wrapper = Path(sys.executable).with_name("asrpt-sbatch")
    if not wrapper.exists():
        pytest.fail(f"{wrapper} is not installed (pip install -e .)")
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chmod(spool, 0o1777)
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT)
    (work / "not-batch.sh").write_text("echo no shebang\n")
    config = tmp_path / "asrpt.toml"
    config.write_text("")
    env = {**cluster.env, "ASRPT_CONFIG": str(config), "ASRPT_REAL_SBATCH": real, "ASRPT_SPOOL_DIR": str(spool)}
    # The wrapper installed as a site does it: a symlink named sbatch first on PATH.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sbatch").symlink_to(wrapper)
    shim_env = {**env, "PATH": f"{shim}:{env['PATH']}"}
    return {"real": real, "wrapper": str(wrapper), "spool": spool, "work": work, "env": env, "shim_env": shim_env, "cluster": cluster}


def _run(argv: list[str], setup: dict, data: bytes | None, *, shim: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``data`` on stdin; with ``shim``, under the PATH where ``sbatch`` is the wrapper."""
    kwargs.setdefault("input", data)
    if "stdin" not in kwargs and kwargs["input"] is None:
        kwargs["stdin"] = subprocess.DEVNULL
    return subprocess.run(argv, capture_output=True, env=setup["shim_env" if shim else "env"], cwd=setup["work"], timeout=120, **kwargs)


def _submit_line(cluster: LocalCluster, job_id: str) -> str | None:
    """The job's SubmitLine, or None where ``scontrol show job`` does not print it (22.05)."""
    text = cluster.run("scontrol", "show", "job", job_id).stdout
    match = re.search(r"SubmitLine=(.*)", text)
    return match.group(1).strip() if match else None


def _slurm_user(cluster: LocalCluster, job_id: str) -> str | None:
    """The user Slurm reports for a job id (an array or a heterogeneous job lists several
    lines, one per task or component, all of the same user)."""
    users = set(cluster.field(job_id, "%u").split())
    assert len(users) <= 1
    return users.pop() if users else None


@pytest.mark.parametrize("name, args, stdin", CASES, ids=[c[0] for c in CASES])
def test_wrapper_output_equals_plain_sbatch(setup, name, args, stdin):
    work = setup["work"]
    has_script = stdin == "script" or "{script}" in args
    args = [a.format(script=work / "job.sh", not_batch=work / "not-batch.sh") for a in args]
    data = SCRIPT.encode() if stdin == "script" else None

    # Both typed as "sbatch": plain, and the wrapper installed as the shim on PATH.
    direct = _run(["sbatch", *args], setup, data)
    wrapped = _run(["sbatch", *args], setup, data, shim=True)

    assert wrapped.returncode == direct.returncode, (direct, wrapped)
    assert normalise(wrapped.stdout) == normalise(direct.stdout)
    assert normalise(wrapped.stderr) == normalise(direct.stderr)

    records = read_spool(setup["spool"])
    job = parse_job_id(wrapped.stdout)
    if job is None:  # failed, --test-only or --quiet: nothing to record
        assert records == []
        return
    [record] = records
    assert record.slurm_job_id == job[0] and record.argv == tuple(args)
    assert record.owner_name == "root" and record.owner_uid == os.getuid()
    if has_script:
        assert (record.model_name, record.workload_class, record.iterations_hint) == ("resnet50", "resnet50", 100.0)
        assert record.recurrence_group is not None and record.script_sha256 is not None
    cluster = setup["cluster"]
    assert _slurm_user(cluster, record.slurm_job_id) == "root"
    direct_job = parse_job_id(direct.stdout)
    assert direct_job is not None
    assert _submit_line(cluster, record.slurm_job_id) == _submit_line(cluster, direct_job[0])  # "sbatch ...", as typed
    assert accept_record(record, lambda job_id: _slurm_user(cluster, job_id)) is True
    assert remove(record)


def test_a_forged_record_for_a_real_job_is_refused(setup):
    """A record for a real job written by someone who is not its owner is discarded."""
    cluster = setup["cluster"]
    wrapped = _run([setup["wrapper"], "--hold", "--parsable", str(setup["work"] / "job.sh")], setup, None)
    job_id = wrapped.stdout.decode().strip()
    [record] = read_spool(setup["spool"])
    path = Path(record.path)
    os.chown(path, 65534, -1)  # as if "nobody" had written it
    [forged] = read_spool(setup["spool"])
    assert forged.owner_name == "nobody"
    assert accept_record(forged, lambda jid: _slurm_user(cluster, jid)) is False
    assert not path.exists()
    assert _slurm_user(cluster, job_id) == "root"


def test_an_unknown_class_warns_at_submission_and_asrptd_schedules_the_job(setup, tmp_path):
    """Issue 16 end to end: ``#ASRPT class=zzz`` through the real wrapper and sbatch gets one
    warning line and is submitted; ``asrptd --once`` ingests the record and exits 0."""
    script = setup["work"] / "zzz.sh"
    script.write_text("#!/bin/sh\n#SBATCH -p v100 --gres=gpu:v100:1 -o /dev/null\n#ASRPT class=zzz\nsleep 30\n")
    submitted = _run([setup["wrapper"], "--parsable", str(script)], setup, None)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.decode().strip().split(";")[0]
    assert job_id.isdigit()
    warnings = [line for line in submitted.stderr.splitlines() if line.startswith(b"asrpt-sbatch: warning:")]
    assert len(warnings) == 1 and b"workload class 'zzz' is unknown" in warnings[0]
    cluster = setup["cluster"]
    config = (cluster.dir / "asrpt.toml").read_text().replace(f"sqlite:///{cluster.dir}/asrpt.db", f"sqlite:///{tmp_path}/d.db")
    config = config.replace(f'dir = "{cluster.dir}/spool-asrpt"', f'dir = "{setup["spool"]}"')
    assert str(setup["spool"]) in config
    path = tmp_path / "daemon.toml"
    path.write_text(config)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("asrptd")), "--config", str(path), "--once"],
        capture_output=True, text=True, env=cluster.env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"job {job_id}: workload class 'zzz' is unknown" in result.stderr
    assert not list(setup["spool"].glob("*.json"))  # ingested, not left to fail again


@pytest.mark.parametrize("bad", [["--time=bad"], ["--no-such-option"]], ids=["invalid value", "unknown option"])
def test_a_rejected_command_line_leaves_a_never_ending_stdin_unread(setup, bad):
    """``ssh host sbatch --time=bad`` with the script on a pipe that never ends: plain sbatch
    fails at once without reading it; the wrapper must do the same."""
    results = []
    for shim in (False, True):
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, SCRIPT.encode())
            result = _run(["sbatch", "--hold", *bad], setup, None, shim=shim, stdin=read_end, input=None)
            os.close(write_end)
            write_end = -1
            left = os.read(read_end, 1 << 16)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        results.append((result.returncode, result.stdout, result.stderr, left))
    assert results[0][0] != 0 and results[0][3] == SCRIPT.encode()
    assert results[1] == results[0]
    assert read_spool(setup["spool"]) == []
