"""asrpt-sbatch end to end against a stub sbatch: passthrough, records, and failing open.

"Identical" below means: the same bytes on stdout and stderr and the same exit status as
running the stub directly with the same arguments and environment.
"""

from __future__ import annotations

import hashlib
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from asrpt.submit_wrapper.main import parse_job_id

from .wrapper_helpers import (
    STUB,
    base_env,
    make_spool,
    record_files,
    records,
    run_stub,
    run_wrapper,
    warning_lines,
    wrapper_command,
)

SCRIPT = "#!/bin/bash\n#SBATCH -J train --gres=gpu:2\n#ASRPT model=llama-7b class=transformer parallel=2x1x1 iterations=5000\nsrun train\n"


@pytest.fixture
def spool(tmp_path):
    return make_spool(tmp_path / "spool")


@pytest.fixture
def job_script(tmp_path):
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    return path


def normalise(output: bytes) -> bytes:
    """Mask job ids (the stub's are its pid): "job 123", "Job 123", and a --parsable "123"."""
    output = re.sub(rb"([Jj]ob )[0-9]+", rb"\1N", output)
    return re.sub(rb"(?m)^[0-9]+(;|$)", rb"N\1", output)


def assert_identical(wrapped, direct, *, job_ids_differ=True):
    """Same status and output; job ids masked unless job_ids_differ is False."""
    assert wrapped.returncode == direct.returncode
    if job_ids_differ:
        assert normalise(wrapped.stdout) == normalise(direct.stdout)
        assert normalise(wrapped.stderr) == normalise(direct.stderr)
    else:
        assert wrapped.stdout == direct.stdout
        assert wrapped.stderr == direct.stderr


# ---- the job id -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output, expected",
    [
        (b"Submitted batch job 42\n", ("42", None)),
        (b"Submitted batch job 42 on cluster east\n", ("42", "east")),
        (b"42\n", ("42", None)),
        (b"42;east\n", ("42", "east")),
        (b"42", ("42", None)),
        (b"Submitted batch job 42\nmore\n", ("42", None)),
        (b"", None),
        (b"sbatch: error: nope\n", None),
        (b"Submitted batch job x\n", None),
        (b"4 2\n", None),
        (b"\xff\xfe\n", None),
    ],
)
def test_parse_job_id(output, expected):
    assert parse_job_id(output) == expected


# ---- passthrough and records ----------------------------------------------------------------


def test_plain_submission_is_passed_through_and_recorded(tmp_path, spool, job_script):
    env = base_env(tmp_path, spool)
    result = run_wrapper([str(job_script)], env, cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == b""
    job_id, _ = parse_job_id(result.stdout)
    assert result.stdout == f"Submitted batch job {job_id}\n".encode()

    [path] = record_files(spool)
    st = path.stat()
    assert st.st_mode & 0o7777 == 0o600 and st.st_uid == os.getuid()
    [record] = records(spool)
    assert record["format"] == "asrpt-submission" and record["version"] == 1
    assert record["slurm_job_id"] == job_id and record["cluster"] is None
    assert record["argv"] == [str(job_script)]
    assert record["cwd"] == str(tmp_path)
    assert record["script"] == {
        "source": "file",
        "path": str(job_script),
        "size_bytes": len(SCRIPT),
        "sha256": hashlib.sha256(SCRIPT.encode()).hexdigest(),
        "text": SCRIPT,
        "truncated": False,
    }
    assert len(record["recurrence_group"]) == 64
    assert record["directives"]["sbatch"] == {"job-name": "train", "gres": "gpu:2"}
    assert record["directives"]["asrpt"] == {
        "model": "llama-7b",
        "workload_class": "transformer",
        "parallel_data": 2,
        "parallel_pipeline": 1,
        "parallel_tensor": 1,
        "iterations": 5000,
    }
    assert record["claimed_user"] == "someone" and record["claimed_uid"] == os.getuid()
    assert record["hostname"] == os.uname().nodename


@pytest.mark.parametrize(
    "args, cluster, expected_stdout",
    [
        (["--parsable"], None, "{id}\n"),
        (["--parsable"], "east", "{id};east\n"),
        (["-H", "--array=0-2"], None, "Submitted batch job {id}\n"),
    ],
)
def test_parsable_and_other_forms(tmp_path, spool, job_script, args, cluster, expected_stdout):
    env = base_env(tmp_path, spool, **({"STUB_CLUSTER": cluster} if cluster else {}))
    result = run_wrapper([*args, str(job_script)], env)
    [record] = records(spool)
    assert result.stdout == expected_stdout.format(id=record["slurm_job_id"]).encode()
    assert record["cluster"] == cluster
    assert record["argv"] == [*args, str(job_script)]


def test_command_line_options_override_script_directives(tmp_path, spool, job_script):
    run_wrapper(["-J", "other", "--gres", "gpu:4", str(job_script), "arg1"], base_env(tmp_path, spool))
    [record] = records(spool)
    assert record["directives"]["sbatch"] == {"job-name": "other", "gres": "gpu:4"}
    assert record["directives"]["script_args"] == ["arg1"]


@pytest.mark.parametrize(
    "stdout, stderr, status",
    [
        (b"", b"sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed\n", 1),
        (b"\xff\xfe not utf-8 \x00\x01 and no newline", b"\xc3\x28 stderr", 3),
        (b"x" * 300_000, b"y" * 100_000, 0),
        (b"", b"", 255),
    ],
)
def test_output_and_status_are_byte_identical(tmp_path, spool, job_script, stdout, stderr, status):
    (tmp_path / "out").write_bytes(stdout)
    (tmp_path / "err").write_bytes(stderr)
    env = base_env(tmp_path, spool, STUB_STDOUT_FILE=str(tmp_path / "out"), STUB_STDERR_FILE=str(tmp_path / "err"), STUB_EXIT=str(status))
    wrapped = run_wrapper([str(job_script)], env)
    direct = run_stub([str(job_script)], env)
    assert_identical(wrapped, direct, job_ids_differ=False)
    assert records(spool) == []  # no job id, no record


def test_a_job_id_is_recorded_even_if_sbatch_then_fails(tmp_path, spool, job_script):
    # sbatch --wait exits with the job's status after printing the id.
    (tmp_path / "out").write_bytes(b"Submitted batch job 77\n")
    env = base_env(tmp_path, spool, STUB_STDOUT_FILE=str(tmp_path / "out"), STUB_EXIT="3")
    result = run_wrapper(["--wait", str(job_script)], env)
    assert result.returncode == 3 and result.stdout == b"Submitted batch job 77\n"
    assert [r["slurm_job_id"] for r in records(spool)] == ["77"]


def test_death_by_signal_is_passed_on(tmp_path, spool, job_script):
    env = base_env(tmp_path, spool, STUB_SIGNAL="TERM")
    wrapped = run_wrapper([str(job_script)], env)
    direct = run_stub([str(job_script)], env)
    assert wrapped.returncode == direct.returncode == -signal.SIGTERM


def test_arguments_reach_sbatch_unchanged(tmp_path, spool, job_script):
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    args = ["--comment", "a  b", "", "-J", "ü", "--wrap= x ", os.fsdecode(b"\xff\xfe"), str(job_script), "--", "-x", "*"]
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir))
    run_wrapper(args, env)
    assert (stub_dir / "argv").read_bytes() == b"".join(os.fsencode(a) + b"\0" for a in args)


@pytest.mark.parametrize("locale_env", [{}, {"LANG": "C"}, {"LC_ALL": "C"}, {"LANG": "C.UTF-8"}])
def test_environment_reaches_sbatch_unchanged(tmp_path, spool, job_script, locale_env):
    # Python's PEP 538 locale coercion adds LC_CTYPE to os.environ; sbatch must not see it.
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), WEIRD="a=b\tc")
    del env["LANG"]
    env.update(locale_env)
    # Every shell exports PWD to the commands it runs; the installed launcher (a /bin/sh
    # script) would add it if the caller had none (a known difference, bin/asrpt-sbatch).
    env["PWD"] = os.getcwd()
    run_wrapper([str(job_script)], env)
    seen = dict(entry.split(b"=", 1) for entry in (stub_dir / "env").read_bytes().split(b"\0") if entry)
    assert seen == {k.encode(): v.encode() for k, v in env.items()}


# ---- where the script comes from ----------------------------------------------------------


def test_script_on_a_pipe_is_recorded_and_handed_on(tmp_path, spool):
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    script = SCRIPT.encode() + b"\xff binary tail\n" + b"z" * 100_000
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_READ_STDIN="1")
    result = run_wrapper(["--parsable"], env, input=script)
    assert result.returncode == 0
    assert (stub_dir / "stdin").read_bytes() == script
    [record] = records(spool)
    assert record["script"]["source"] == "stdin"
    assert record["script"]["sha256"] == hashlib.sha256(script).hexdigest()
    assert record["script"]["size_bytes"] == len(script)
    assert record["script"]["truncated"] is True and record["script"]["text"].startswith(SCRIPT)
    assert record["directives"]["asrpt"]["model"] == "llama-7b"


def test_script_in_a_redirected_file_is_read_without_moving_the_offset(tmp_path, spool, job_script):
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_READ_STDIN="1")
    with open(job_script, "rb") as stdin:
        run_wrapper([], env, stdin=stdin)
    assert (stub_dir / "stdin").read_text() == SCRIPT
    assert records(spool)[0]["script"]["text"] == SCRIPT


def test_a_terminal_on_stdin_is_not_read(tmp_path, spool):
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_READ_STDIN="1")
    controller, terminal = pty.openpty()
    try:
        result = run_wrapper([], env, stdin=terminal, timeout=30)
    finally:
        os.close(terminal)
        os.close(controller)
    assert result.returncode == 0
    [record] = records(spool)
    assert record["script"]["source"] == "stdin" and record["script"]["text"] is None


def test_a_pipe_is_left_alone_when_the_command_line_is_not_understood(tmp_path, spool):
    # "--some-plugin-option" might take the next word as its value; we cannot be sure that
    # stdin is the script, so it must reach sbatch untouched.
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_READ_STDIN="1")
    run_wrapper(["--some-plugin-option"], env, input=b"not ours to read")
    assert (stub_dir / "stdin").read_bytes() == b"not ours to read"
    [record] = records(spool)
    assert record["script"]["text"] is None
    assert record["directives"]["problems"] == ["unknown option --some-plugin-option"]


def test_a_script_that_is_a_pipe_is_not_read(tmp_path, spool):
    # sbatch <(generate-script): the script path is /dev/fd/N, a pipe only sbatch may drain.
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    read_end, write_end = os.pipe()
    os.write(write_end, SCRIPT.encode())
    os.close(write_end)
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_SCRIPT_ARG="1")
    try:
        run_wrapper([f"/dev/fd/{read_end}"], env, pass_fds=(read_end,))
    finally:
        os.close(read_end)
    assert (stub_dir / "script").read_text() == SCRIPT
    [record] = records(spool)
    assert record["script"]["sha256"] is None and record["script"]["path"] == f"/dev/fd/{read_end}"


def test_a_loop_reading_its_own_stdin_is_not_disturbed(tmp_path, spool, job_script):
    env = base_env(tmp_path, spool)
    wrapper = " ".join(wrapper_command())
    loop = f"printf 'a\\nb\\nc\\n' | while read x; do {wrapper} {job_script} $x >/dev/null; echo $x; done"
    result = subprocess.run(["/bin/sh", "-c", loop], env=env, capture_output=True, timeout=60)
    assert result.stdout == b"a\nb\nc\n"
    assert len(records(spool)) == 3


def test_wrap_is_recorded(tmp_path, spool):
    run_wrapper(["--wrap", "python train.py --lr 3e-4", "-p", "gpu"], base_env(tmp_path, spool))
    [record] = records(spool)
    assert record["script"]["source"] == "wrap" and record["script"]["text"] == "python train.py --lr 3e-4"
    assert record["directives"]["sbatch"] == {"wrap": "python train.py --lr 3e-4", "partition": "gpu"}


@pytest.mark.parametrize("args", [["--test-only"], ["--help"], ["--usage"], ["-V"], ["-Q"]])
def test_options_without_a_job_id_exec_sbatch_and_record_nothing(tmp_path, spool, job_script, args):
    env = base_env(tmp_path, spool)
    wrapped = run_wrapper([*args, str(job_script)], env)
    direct = run_stub([*args, str(job_script)], env)
    assert_identical(wrapped, direct)
    assert records(spool) == []


def test_failed_submission_writes_no_record(tmp_path, spool, job_script):
    (tmp_path / "err").write_bytes(b"sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    (tmp_path / "out").write_bytes(b"")
    env = base_env(tmp_path, spool, STUB_STDERR_FILE=str(tmp_path / "err"), STUB_STDOUT_FILE=str(tmp_path / "out"), STUB_EXIT="1")
    result = run_wrapper(["-p", "nope", str(job_script)], env)
    assert result.returncode == 1 and records(spool) == []
    assert warning_lines(result.stderr) == []


def test_empty_spool_setting_disables_recording(tmp_path, spool, job_script):
    env = base_env(tmp_path, spool)
    env["ASRPT_SPOOL_DIR"] = ""
    result = run_wrapper([str(job_script)], env)
    assert result.returncode == 0 and result.stderr == b"" and records(spool) == []


# ---- failing open -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_unusable_spool_warns_once_and_still_submits(tmp_path, job_script, where):
    spool = tmp_path / "spool"
    if where == "a-file":
        spool.write_text("not a directory")
    env = base_env(tmp_path, spool)
    wrapped = run_wrapper([str(job_script)], env)
    direct = run_stub([str(job_script)], env)
    assert wrapped.returncode == 0
    assert parse_job_id(wrapped.stdout) is not None
    [line] = warning_lines(wrapped.stderr)
    assert wrapped.stderr == line + b"\n" and direct.stderr == b""
    assert b"was submitted but not recorded in " + str(spool).encode() in line
    if where == "missing":
        assert b"install -d -m 1777" in line


def test_garbage_asrpt_directives_warn_once_naming_them(tmp_path, spool):
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/sh\n#ASRPT model=ok parallel=2x2 dp=three\n#ASRPT \x01\x02=\x03 iterations=-1\ntrue\n")
    result = run_wrapper([str(script)], base_env(tmp_path, spool))
    assert result.returncode == 0 and parse_job_id(result.stdout)
    [line] = warning_lines(result.stderr)
    assert result.stderr == line + b"\n"
    text = line.decode()
    assert f"{script} line 2: #ASRPT parallel=2x2" in text and "#ASRPT dp=three" in text
    assert "line 3:" in text and "#ASRPT iterations=-1" in text
    [record] = records(spool)
    assert record["directives"]["asrpt"] == {"model": "ok"}
    assert len(record["directives"]["warnings"]) == 4


def test_a_serving_job_is_recorded_as_given_even_for_a_model_asrpt_does_not_know(tmp_path, spool):
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gres=gpu:4\n#ASRPT serve-model=no-such-llm tp=auto\nsrun ./serve\n")
    env = base_env(tmp_path, spool)
    result = run_wrapper([str(script)], env)
    direct = run_stub([str(script)], env)
    assert result.returncode == direct.returncode == 0 and parse_job_id(result.stdout)
    assert result.stderr == b""  # the wrapper does not judge the model: no warning, no change
    [record] = records(spool)
    assert record["argv"] == [str(script)]
    assert record["directives"]["asrpt"] == {"serve_model": "no-such-llm", "parallel_tensor_auto": True}
    assert record["directives"]["warnings"] == []


def test_several_problems_still_make_one_line(tmp_path, job_script):
    spool = tmp_path / "missing-spool"
    (tmp_path / "asrpt.toml").write_text('[wrapper]\nreal_sbtach = "/x"\n')
    job_script.write_text("#!/bin/sh\n#ASRPT dp=0\ntrue\n")
    result = run_wrapper([str(job_script)], base_env(tmp_path, spool))
    assert result.returncode == 0 and parse_job_id(result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(b"asrpt-sbatch: warning: ")
    assert b"real_sbtach" in lines[0] and b"#ASRPT dp=0" in lines[0] and b"not recorded" in lines[0]


def _wrapper_launcher() -> Path:
    launcher = Path(wrapper_command()[0])
    if launcher.name != "asrpt-sbatch":
        pytest.skip("the asrpt-sbatch console script is not installed")
    return launcher


@pytest.mark.parametrize("how", ["itself", "symlink", "copy"])
def test_a_real_sbatch_that_is_the_wrapper_is_refused(tmp_path, spool, job_script, how):
    launcher = _wrapper_launcher()
    if how == "itself":
        bad = launcher
    elif how == "symlink":
        bad = tmp_path / "sbatch"
        bad.symlink_to(launcher)
    else:
        bad = tmp_path / "sbatch"
        shutil.copy(launcher, bad)
    (tmp_path / "asrpt.toml").write_text(f'[wrapper]\nreal_sbatch = "{STUB}"\n')
    env = base_env(tmp_path, spool, real=bad)
    result = run_wrapper([str(job_script)], env, timeout=30)
    assert result.returncode == 0 and parse_job_id(result.stdout)
    [line] = warning_lines(result.stderr)
    assert b"is asrpt-sbatch itself" in line and str(bad).encode() in line
    assert len(records(spool)) == 1


def test_config_file_supplies_real_sbatch_and_spool(tmp_path, job_script):
    spool = make_spool(tmp_path / "from-config")
    (tmp_path / "asrpt.toml").write_text(f'[wrapper]\nreal_sbatch = "{STUB}"\n\n[spool]\ndir = "{spool}"\n\n[daemon]\ninterval_s = 5\n')
    env = base_env(tmp_path, spool)
    del env["ASRPT_REAL_SBATCH"], env["ASRPT_SPOOL_DIR"]
    result = run_wrapper([str(job_script)], env)
    assert result.returncode == 0 and result.stderr == b""
    assert len(records(spool)) == 1


def test_internal_error_before_sbatch_runs_execs_sbatch(tmp_path, spool, job_script):
    # Simulated by making the argv parser blow up inside a subprocess.
    code = (
        "import sys\n"
        "from asrpt.submit_wrapper import directives, main\n"
        "def boom(args): raise RuntimeError('parser bug')\n"
        "directives.parse_argv = boom\n"
        f"sys.exit(main.main(['asrpt-sbatch', '--parsable', {str(job_script)!r}]))\n"
    )
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0 and parse_job_id(result.stdout)
    [line] = warning_lines(result.stderr)
    assert b"parser bug" in line
    assert (stub_dir / "argv").read_bytes() == b"--parsable\0" + str(job_script).encode() + b"\0"
    assert records(spool) == []


# ---- many at once -------------------------------------------------------------------------


@pytest.mark.slow
def test_hundreds_of_concurrent_submissions_lose_nothing(tmp_path, spool, job_script):
    env = base_env(tmp_path, spool)
    count = 200
    procs = [subprocess.Popen(wrapper_command() + ["--parsable", str(job_script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(count)]

    def finish(proc):
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(finish, procs))
    assert all(rc == 0 and err == b"" for rc, _, err in results)
    printed = sorted(out.decode().strip() for _, out, _ in results)
    recorded = sorted(r["slurm_job_id"] for r in records(spool))
    assert recorded == printed and len(set(recorded)) == count
    assert not [p for p in spool.iterdir() if p.name.startswith(".")]


# ---- the lean launcher ----------------------------------------------------------------------


def test_lean_launcher_runs_the_same_wrapper_and_ignores_pythonpath(tmp_path, spool, job_script):
    from asrpt.submit_wrapper.launcher import launcher_text, write_launcher

    launcher = write_launcher(tmp_path / "sbatch")
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert launcher.read_text().startswith(f"#!{sys.executable} -IS\n")
    poison = tmp_path / "poison"
    poison.mkdir()
    (poison / "asrpt").mkdir()
    (poison / "asrpt" / "__init__.py").write_text("raise SystemExit('PYTHONPATH was used')\n")
    env = base_env(tmp_path, spool, PYTHONPATH=str(poison))
    result = subprocess.run([str(launcher), "--parsable", str(job_script)], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0 and result.stderr == b""
    assert [r["slurm_job_id"] for r in records(spool)] == [result.stdout.decode().strip()]
    # and a real sbatch configured as the launcher itself is refused
    env["ASRPT_REAL_SBATCH"] = str(launcher)
    (tmp_path / "asrpt.toml").write_text(f'[wrapper]\nreal_sbatch = "{STUB}"\n')
    again = subprocess.run([str(launcher), str(job_script)], env=env, capture_output=True, timeout=60)
    assert again.returncode == 0 and b"is asrpt-sbatch itself" in again.stderr
    with pytest.raises(ValueError):
        launcher_text(python="python3")


# ---- signals while sbatch runs --------------------------------------------------------------


def _start_sleeping_submission(tmp_path, spool, job_script, seconds):
    env = base_env(tmp_path, spool, STUB_SLEEP=str(seconds))
    proc = subprocess.Popen(wrapper_command() + [str(job_script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline()  # the job id: sbatch is running now
    assert parse_job_id(line)
    return proc


def test_sigterm_is_forwarded_to_sbatch_and_its_death_passed_on(tmp_path, spool, job_script):
    proc = _start_sleeping_submission(tmp_path, spool, job_script, 60)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert len(records(spool)) == 1  # the job was submitted before


def test_sigint_to_the_wrapper_alone_does_not_abandon_sbatch(tmp_path, spool, job_script):
    # A terminal's Ctrl-C reaches sbatch directly (same process group); the wrapper must not
    # die of it and leave sbatch's output and status behind.
    proc = _start_sleeping_submission(tmp_path, spool, job_script, 1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == b""


# ---- issue 16: what the daemon cannot use is said at submission -------------------------------


@pytest.mark.parametrize(
    "header, args, words",
    [
        ("#ASRPT class=zzz\n", [], b"workload class 'zzz' is unknown"),
        ("", ["--comment", "asrpt:class=bert2"], b"workload class 'bert2' is unknown"),
        ("", ["--comment=x asrpt:mb=10000000000000000000000000"], b"asrpt:mb=1000"),
    ],
)
def test_data_the_daemon_cannot_use_warns_once_and_submits_unchanged(tmp_path, spool, header, args, words):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{header}true\n")
    env = base_env(tmp_path, spool)
    wrapped = run_wrapper([*args, str(script)], env)
    direct = run_stub([*args, str(script)], env)
    assert wrapped.returncode == direct.returncode == 0
    assert parse_job_id(wrapped.stdout) is not None and direct.stderr == b""
    [line] = warning_lines(wrapped.stderr)
    assert wrapped.stderr == line + b"\n" and words in line and (b"submitted" in line or b"ignores" in line)
    [record] = records(spool)
    assert record["argv"] == [*args, str(script)]


def test_a_known_class_in_any_spelling_does_not_warn(tmp_path, spool):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#ASRPT class=ResNet-50\ntrue\n")
    result = run_wrapper(["--comment", "asrpt:class=BERT,dp=2", str(script)], base_env(tmp_path, spool))
    assert result.returncode == 0 and result.stderr == b""


def test_the_wrappers_class_list_is_the_packaged_speed_tables():
    from asrpt.core.speed import default_speed_table
    from asrpt.submit_wrapper.directives import KNOWN_WORKLOAD_CLASSES

    assert tuple(default_speed_table().workload_classes) == KNOWN_WORKLOAD_CLASSES


# ---- byte-transparency: argv[0], signal dispositions, exit status (issue 16) ----------------

PROBE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* An ELF sbatch for tests: a #! script cannot see its argv[0]. Writes argv[0] and the SigIgn
   line of /proc/self/status into $PROBE_DIR, then becomes the stub with the same argv. */
int main(int argc, char **argv) {
    const char *dir = getenv("PROBE_DIR");
    if (dir) {
        char path[4096], line[512];
        snprintf(path, sizeof path, "%s/argv0", dir);
        FILE *out = fopen(path, "w");
        fputs(argv[0], out);
        fclose(out);
        snprintf(path, sizeof path, "%s/sigign", dir);
        out = fopen(path, "w");
        FILE *status = fopen("/proc/self/status", "r");
        while (fgets(line, sizeof line, status))
            if (!strncmp(line, "SigIgn:", 7)) fputs(line + 7, out);
        fclose(status);
        fclose(out);
    }
    execv(getenv("PROBE_NEXT"), argv);
    return 127;
}
"""


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    """The compiled probe sbatch (it execs the stub after reporting)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the argv[0]/signal probe")
    folder = tmp_path_factory.mktemp("probe")
    (folder / "probe.c").write_text(PROBE_C)
    subprocess.run([cc, "-O", "-o", str(folder / "probe"), str(folder / "probe.c")], check=True)
    return folder / "probe"


def _probe_env(tmp_path, spool, probe, **extra):
    report = tmp_path / "report"
    report.mkdir(exist_ok=True)
    return base_env(tmp_path, spool, real=probe, PROBE_DIR=str(report), PROBE_NEXT=str(STUB), **extra), report


def _ignoring(*signals):
    def preexec():
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
    return preexec


def _console_script() -> Path:
    script = Path(sys.executable).with_name("asrpt-sbatch")
    if not script.exists():
        pytest.skip("asrpt-sbatch is not installed as a console script")
    return script


def test_sbatch_gets_the_name_the_user_typed_as_argv0(tmp_path, spool, job_script, probe):
    """Installed as the shim ``sbatch`` and typed as ``sbatch``, sbatch's getopt messages and
    Slurm's SubmitLine must say ``sbatch``, not the real path; another spelling is kept."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    (shim_dir / "sbatch").symlink_to(_console_script())
    env, report = _probe_env(tmp_path, spool, probe)
    env["PATH"] = f"{shim_dir}:{env['PATH']}"
    for typed, expected in [("sbatch", "sbatch"), (str(shim_dir / "sbatch"), "sbatch"), ("./bin/sbatch", "./bin/sbatch")]:
        for extra in ([], ["--help"]):  # run as a child, and exec'd
            (report / "argv0").unlink(missing_ok=True)
            result = subprocess.run([typed, *extra, str(job_script)], env=env, cwd=tmp_path, capture_output=True, timeout=60)
            assert result.returncode == 0, result.stderr
            assert (report / "argv0").read_text() == expected, (typed, extra)


SIGNAL_SETS = [
    (signal.SIGHUP,),  # nohup
    (signal.SIGINT,),  # trap '' INT
    (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP),  # a background job of sh
    (),
]


@pytest.mark.parametrize("ignored", SIGNAL_SETS, ids=["hup", "int", "int-quit-term-hup", "none"])
@pytest.mark.parametrize("extra", [[], ["--help"]], ids=["child", "exec"])
def test_sbatch_inherits_the_callers_signal_dispositions(tmp_path, spool, job_script, probe, ignored, extra):
    env, report = _probe_env(tmp_path, spool, probe)
    direct = subprocess.run([str(probe), *extra, str(job_script)], env=env, preexec_fn=_ignoring(*ignored), capture_output=True, timeout=60)
    direct_ignored = (report / "sigign").read_text()
    wrapped = run_wrapper([*extra, str(job_script)], env, preexec_fn=_ignoring(*ignored))
    assert wrapped.returncode == direct.returncode == 0, wrapped.stderr
    assert (report / "sigign").read_text() == direct_ignored
    mask = int(direct_ignored, 16)
    assert all(mask & (1 << (sig - 1)) for sig in ignored)


def test_nohup_sbatch_wait_survives_a_hangup(tmp_path, spool, job_script):
    """``nohup sbatch --wait``: a SIGHUP (the terminal closing) is ignored by sbatch as when it
    is run directly, so the wrapper returns sbatch's status instead of dying."""
    env = base_env(tmp_path, spool, STUB_SLEEP="1")
    results = []
    for argv in ([str(STUB), str(job_script)], [*wrapper_command(), str(job_script)]):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ignoring(signal.SIGHUP, signal.SIGINT))
        assert proc.stdout.readline().startswith(b"Submitted batch job ")
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGINT)
        results.append(proc.wait(timeout=30))
        proc.stdout.close()
        proc.stderr.close()
    assert results == [0, 0]
    assert len(records(spool)) == 1


@pytest.mark.parametrize("how", ["closed pipe", "file size limit"])
def test_a_stdout_sbatch_could_not_write_kills_the_wrapper_as_it_kills_sbatch(tmp_path, spool, job_script, how):
    """``sbatch x | head -c0`` ends with 141 (SIGPIPE) and ``ulimit -f 0; sbatch x > f`` with
    153 (SIGXFSZ) when sbatch runs directly; the wrapper must end the same way, with the
    submission recorded."""
    import resource

    env = base_env(tmp_path, spool)
    statuses = []
    for argv in ([str(STUB)], wrapper_command()):
        if how == "closed pipe":
            read_end, stdout = os.pipe()
            os.close(read_end)
            preexec = None
        else:
            # stdout already at the limit; the record (a smaller new file) still fits
            (tmp_path / "out").write_bytes(b"x" * 16384)
            stdout = os.open(tmp_path / "out", os.O_WRONLY | os.O_APPEND)
            preexec = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))  # noqa: E731
        try:
            result = subprocess.run([*argv, str(job_script)], env=env, stdout=stdout, stderr=subprocess.PIPE, preexec_fn=preexec, timeout=60)
        finally:
            os.close(stdout)
        statuses.append((result.returncode, result.stderr))
    expected = -signal.SIGPIPE if how == "closed pipe" else -signal.SIGXFSZ
    assert statuses == [(expected, b""), (expected, b"")]
    assert len(records(spool)) == 1


# ---- a stalled spool (issue 16) -------------------------------------------------------------

STALLED_SPOOL = """
import os, sys
from asrpt.submit_wrapper import spool
def stalled(spool_dir, name, payload):
    fd = os.open(os.environ["FIFO"], os.O_WRONLY)  # no reader: blocks like a frozen file system
    os.write(fd, payload)
    os.close(fd)
    return os.environ["FIFO"]
spool.write_record = stalled
from asrpt.submit_wrapper.main import main
sys.exit(main(["sbatch", *sys.argv[1:]]))
"""


def test_a_stalled_spool_never_holds_the_user_up(tmp_path, spool, job_script):
    """fsfreeze on the spool: the record write blocks in the kernel. The user still gets
    sbatch's output and status at once, and the pipes close (``$(sbatch ...)`` returns)."""
    import time

    fifo = tmp_path / "frozen"
    os.mkfifo(fifo)
    env = base_env(tmp_path, spool, FIFO=str(fifo))
    direct = run_stub([str(job_script)], env)
    start = time.monotonic()
    try:
        wrapped = subprocess.run([sys.executable, "-c", STALLED_SPOOL, str(job_script)], env=env, capture_output=True, timeout=20)
    finally:
        # Thaw: let the left-behind writer finish.
        release = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    elapsed = time.monotonic() - start
    try:
        assert wrapped.returncode == direct.returncode == 0
        assert normalise(wrapped.stdout) == normalise(direct.stdout)
        [line] = warning_lines(wrapped.stderr)
        assert b"not yet recorded" in line and wrapped.stderr == line + b"\n"
        assert elapsed < 5
    finally:
        time.sleep(0.2)
        os.close(release)


# ---- stdin is sbatch's to read, and only once it validated its command line (issue 16) ------


@pytest.mark.parametrize("delay_s", ["", "3"], ids=["prompt", "slow"])
def test_a_command_line_sbatch_rejects_leaves_a_piped_script_unread(tmp_path, spool, delay_s):
    """``ssh host sbatch --time=bad``: sbatch fails before it reads stdin, which never ends.
    The wrapper must not wait for EOF, and must leave the bytes for whoever reads next.
    ``slow``: a CI run saw the wrapper take the piped script from an sbatch that needed more
    than the 2 s the feeder used to wait before copying anyway: sbatch was busy (here:
    asleep), not reading its stdin, and then rejected its command line."""
    env = base_env(tmp_path, spool, STUB_EXIT="255", STUB_STDOUT_FILE="/dev/null", STUB_DELAY=delay_s)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, SCRIPT.encode())  # and no EOF: the writer stays open
        wrapped = run_wrapper(["--hold"], env, stdin=read_end, timeout=30)
        assert wrapped.returncode == 255 and wrapped.stdout == b"" and wrapped.stderr == b""
        os.close(write_end)
        write_end = -1
        assert os.read(read_end, 1 << 16) == SCRIPT.encode()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    assert records(spool) == []


def test_a_piped_script_reaches_sbatch_once_it_reads_and_is_recorded(tmp_path, spool):
    import time

    from asrpt.submit_wrapper.main import STDIN_WAIT_FALLBACK_S

    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    env = base_env(tmp_path, spool, STUB_DIR=str(stub_dir), STUB_READ_STDIN="1")
    start = time.monotonic()
    result = run_wrapper(["--hold", "--parsable"], env, input=SCRIPT.encode())
    elapsed = time.monotonic() - start
    assert result.returncode == 0 and result.stderr == b""
    assert (stub_dir / "stdin").read_bytes() == SCRIPT.encode()
    [record] = records(spool)
    assert record["script"]["source"] == "stdin" and record["script"]["text"] == SCRIPT
    assert record["directives"]["asrpt"]["model"] == "llama-7b"
    assert elapsed < STDIN_WAIT_FALLBACK_S  # sbatch's read was seen, not waited out


def test_without_proc_a_piped_script_is_copied_at_once_not_dropped(monkeypatch):
    """With no /proc (a chroot, some containers) every /proc/PID/syscall read fails as if
    sbatch had exited: the feeder must copy the script at once, not close sbatch's stdin empty."""
    from asrpt.submit_wrapper import main as wrapper

    monkeypatch.setattr(wrapper, "_proc_shows_syscalls", lambda: False)
    read_fd, write_fd = os.pipe()
    try:
        feeder = wrapper.StdinFeeder(write_fd, pid=2**22 + 12345)  # no such process either
        assert feeder._wait_until_sbatch_reads() is True
    finally:
        os.close(read_fd)
        os.close(write_fd)
