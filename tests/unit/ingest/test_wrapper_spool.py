"""Ingest: the submitter is the file's owner, Slurm must agree, bad files leave the spool.

Needs root (files are given to other owners with chown). The forgery tests at the end create
two unprivileged users with useradd and run the wrapper and a forger as them.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from asrpt.submit_wrapper import spool
from asrpt.ingest.wrapper_spool import accept_record, read_spool, remove, to_submission_record

from tests.unit.submit_wrapper.wrapper_helpers import STUB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: spool files are chowned to other users")

NOBODY = pwd.getpwnam("nobody")


def record_document(job_id: str = "42", **overrides) -> dict:
    document = {
        "format": "asrpt-submission",
        "version": 1,
        "slurm_job_id": job_id,
        "cluster": None,
        "submit_time_s": 1_700_000_000.5,
        "cwd": "/home/x",
        "argv": ["--parsable", "job.sh", "a"],
        "argv_truncated": False,
        "script": {"source": "file", "path": "job.sh", "size_bytes": 10, "sha256": "a" * 64, "text": "#!/bin/sh\n", "truncated": False},
        "recurrence_group": "b" * 64,
        "directives": {
            "sbatch": {"parsable": True, "job-name": "j"},
            "het_components": 1,
            "script_args": ["a"],
            "asrpt": {"model": "llama-7b", "workload_class": "llm", "parallel_data": 2, "parallel_pipeline": 1, "parallel_tensor": 4, "micro_batches": 8, "iterations": 1000},
            "warnings": [],
            "problems": [],
        },
        "claimed_user": "root",
        "claimed_uid": 0,
        "hostname": "login1",
        "wrapper_version": "0.1.0",
    }
    document.update(overrides)
    return document


@pytest.fixture
def spool_dir(tmp_path):
    path = tmp_path / "spool"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def put(spool_dir: Path, name: str, content: bytes | dict, *, uid: int = 0, mode: int = 0o600) -> Path:
    path = spool_dir / name
    path.write_bytes(json.dumps(content).encode() if isinstance(content, dict) else content)
    os.chown(path, uid, -1)
    os.chmod(path, mode)
    return path


def rejected(spool_dir: Path) -> list[str]:
    directory = spool_dir / spool.REJECTED_DIR
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


# ---- trust ----------------------------------------------------------------------------------


def test_the_owner_comes_from_the_file_not_the_record(spool_dir):
    put(spool_dir, "r.json", record_document(claimed_user="root", claimed_uid=0), uid=NOBODY.pw_uid)
    [record] = read_spool(spool_dir)
    assert (record.owner_uid, record.owner_name) == (NOBODY.pw_uid, "nobody")
    assert (record.claimed_user, record.claimed_uid) == ("root", 0)
    assert record.slurm_job_id == "42" and record.model_name == "llama-7b" and record.parallel_tensor == 4
    assert record.iterations_hint == 1000.0 and record.command == "job.sh a"


def test_a_record_for_someone_elses_job_is_discarded(spool_dir, caplog):
    put(spool_dir, "r.json", record_document("42"), uid=NOBODY.pw_uid)
    [record] = read_spool(spool_dir)
    with caplog.at_level(logging.WARNING, logger="asrpt.ingest.wrapper_spool"):
        assert accept_record(record, {"42": "root"}.get) is False
    assert not (spool_dir / "r.json").exists() and rejected(spool_dir) == ["r.json"]
    [message] = [r for r in caplog.records if getattr(r, "action", None) == "spool_forged"]
    assert "written by nobody" in message.getMessage() and "belongs to root" in message.getMessage()
    assert message.job_id == "42"


def test_a_record_whose_owner_has_no_name_is_discarded(spool_dir):
    put(spool_dir, "r.json", record_document("42"), uid=65_000)  # no passwd entry
    [record] = read_spool(spool_dir)
    assert record.owner_name is None
    assert accept_record(record, lambda job: "root") is False
    assert rejected(spool_dir) == ["r.json"]


def test_a_matching_record_is_accepted_and_removed_only_when_asked(spool_dir):
    put(spool_dir, "r.json", record_document("42"), uid=NOBODY.pw_uid)
    [record] = read_spool(spool_dir)
    assert accept_record(record, {"42": "nobody"}.get) is True
    assert (spool_dir / "r.json").exists()  # still there until stored
    assert remove(record) is True and not (spool_dir / "r.json").exists()
    assert remove(record) is False


def test_a_record_for_an_unknown_job_waits_then_expires(spool_dir):
    put(spool_dir, "r.json", record_document("42"))
    [record] = read_spool(spool_dir)
    unknown = lambda job: None  # noqa: E731
    assert accept_record(record, unknown, now_s=record.spooled_at_s + 60, max_pending_age_s=3600) is False
    assert (spool_dir / "r.json").exists()
    [again] = read_spool(spool_dir)
    assert accept_record(again, unknown, now_s=record.spooled_at_s + 3601, max_pending_age_s=3600) is False
    assert not (spool_dir / "r.json").exists() and rejected(spool_dir) == ["r.json"]


def test_remove_leaves_a_file_that_was_replaced_after_reading(spool_dir):
    put(spool_dir, "r.json", record_document("42"))
    [record] = read_spool(spool_dir)
    (spool_dir / "r.json").unlink()
    put(spool_dir, "r.json", record_document("43"))  # may well get the same inode number
    os.utime(spool_dir / "r.json")
    assert remove(record) is False
    assert (spool_dir / "r.json").exists()


# ---- bad files ----------------------------------------------------------------------------

BAD_DOCUMENTS = {
    "not-json": b"{not json",
    "not-utf8": b"\xff\xfe",
    "array": b"[1, 2]",
    "wrong-format": record_document(format="something-else"),
    "future-version": record_document(version=2),
    "bool-version": record_document(version=True),
    "no-job-id": record_document(slurm_job_id=None),
    "job-id-path": record_document("../../etc/passwd"),
    "job-id-number": record_document(slurm_job_id=42),
    "nan-time": b'{"format": "asrpt-submission", "version": 1, "slurm_job_id": "1", "submit_time_s": NaN}',
    "bool-dp": record_document(directives={"asrpt": {"parallel_data": True}}),
    "zero-dp": record_document(directives={"asrpt": {"parallel_data": 0}}),
    "negative-iterations": record_document(directives={"asrpt": {"iterations": -1}}),
    "bad-sha": record_document(recurrence_group="xyz"),
    "bad-source": record_document(script={"source": "network"}),
    "argv-not-strings": record_document(argv=[1, 2]),
    "huge-model": record_document(directives={"asrpt": {"model": "m" * 300}}),
    "huge-serve-model": record_document(directives={"asrpt": {"serve_model": "m" * 300}}),
    # beyond the wrapper's own limit, which is the history's column (String(128))
    "long-model": record_document(directives={"asrpt": {"model": "m" * 129}}),
    "long-class": record_document(directives={"asrpt": {"workload_class": "c" * 129}}),
    "serve-model-number": record_document(directives={"asrpt": {"serve_model": 7}}),
    "tp-auto-string": record_document(directives={"asrpt": {"parallel_tensor_auto": "yes"}}),
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_malformed_records_are_moved_to_rejected(spool_dir, name, caplog):
    put(spool_dir, f"{name}.json", BAD_DOCUMENTS[name])
    with caplog.at_level(logging.WARNING, logger="asrpt.ingest.wrapper_spool"):
        assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == [f"{name}.json"]
    assert any("refusing spool file" in r.getMessage() for r in caplog.records)
    directory = spool_dir / spool.REJECTED_DIR
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_oversized_records_are_rejected(spool_dir):
    put(spool_dir, "big.json", record_document(cwd="x" * 2000))
    assert read_spool(spool_dir, max_bytes=1000) == []
    assert rejected(spool_dir) == ["big.json"]


def test_a_minimal_record_is_accepted(spool_dir):
    put(spool_dir, "min.json", {"format": "asrpt-submission", "version": 1, "slurm_job_id": "7"})
    [record] = read_spool(spool_dir)
    assert record.slurm_job_id == "7" and record.model_name is None and record.argv == ()


def test_names_up_to_the_wrappers_limit_are_accepted(spool_dir):
    put(spool_dir, "names.json", record_document(directives={"asrpt": {"model": "m" * 128, "workload_class": "c" * 128}}))
    [record] = read_spool(spool_dir)
    assert record.model_name == "m" * 128 and record.workload_class == "c" * 128


def test_a_symlink_is_rejected_and_its_target_untouched(spool_dir, tmp_path):
    target = tmp_path / "secret.json"
    target.write_text(json.dumps(record_document()))
    os.symlink(target, spool_dir / "link.json")
    assert read_spool(spool_dir) == []
    assert target.exists() and rejected(spool_dir) == ["link.json"]


def test_a_fifo_is_rejected_without_blocking(spool_dir):
    os.mkfifo(spool_dir / "fifo.json")
    assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == ["fifo.json"]


def test_a_hard_linked_file_is_rejected(spool_dir, tmp_path):
    path = put(spool_dir, "a.json", record_document())
    os.link(path, tmp_path / "elsewhere")
    assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == ["a.json"]


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_file_others_could_rewrite_is_rejected(spool_dir, mode):
    put(spool_dir, "w.json", record_document(), uid=NOBODY.pw_uid, mode=mode)
    assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == ["w.json"]


def test_a_directory_or_other_name_is_rejected(spool_dir):
    (spool_dir / "dir.json").mkdir()
    put(spool_dir, "notes.txt", b"hello")
    assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == ["dir.json", "notes.txt"]


def test_an_unsafe_rejected_directory_is_not_used(spool_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, spool_dir / spool.REJECTED_DIR)
    put(spool_dir, "bad.json", b"{")
    assert read_spool(spool_dir) == []
    assert list(elsewhere.iterdir()) == [] and not (spool_dir / "bad.json").exists()


def test_a_rejected_directory_owned_by_someone_else_is_not_used(spool_dir):
    (spool_dir / spool.REJECTED_DIR).mkdir()
    os.chown(spool_dir / spool.REJECTED_DIR, NOBODY.pw_uid, -1)
    put(spool_dir, "bad.json", b"{")
    read_spool(spool_dir)
    assert rejected(spool_dir) == [] and not (spool_dir / "bad.json").exists()


def test_temp_files_are_skipped_and_stale_ones_deleted(spool_dir):
    fresh = put(spool_dir, f"{spool.TEMP_PREFIX}1-fresh", b"{")
    stale = put(spool_dir, f"{spool.TEMP_PREFIX}2-stale", b"{")
    os.utime(stale, (0, 0))
    assert read_spool(spool_dir) == []
    assert fresh.exists() and not stale.exists()


def test_old_rejected_files_are_pruned(spool_dir):
    put(spool_dir, "bad.json", b"{")
    read_spool(spool_dir)
    assert rejected(spool_dir) == ["bad.json"]
    read_spool(spool_dir, now_s=10**12)
    assert rejected(spool_dir) == []


def test_a_missing_spool_yields_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="asrpt.ingest.wrapper_spool"):
        assert read_spool(tmp_path / "absent") == []
    assert "does not exist" in caplog.text


def test_one_user_cannot_starve_the_others(spool_dir):
    for i in range(10):
        put(spool_dir, f"0-flood-{i}.json", record_document(str(100 + i)), uid=NOBODY.pw_uid)
    put(spool_dir, "9-genuine.json", record_document("7"))
    records = read_spool(spool_dir, max_records_per_owner=3, max_records=5)
    assert sorted(r.slurm_job_id for r in records) == ["100", "101", "102", "7"]
    assert len(list(spool_dir.glob("*.json"))) == 11  # the rest waits for later cycles


def test_records_are_read_oldest_first(spool_dir):
    put(spool_dir, "b.json", record_document("2"))
    put(spool_dir, "a.json", record_document("1"))
    assert [r.slurm_job_id for r in read_spool(spool_dir, max_records=1)] == ["2"]


# ---- storing --------------------------------------------------------------------------------


def test_an_accepted_record_goes_into_the_history_repository(spool_dir, tmp_path):
    from asrpt.db.migrate import upgrade_engine
    from asrpt.db.repository import HistoryRepository
    from asrpt.db.session import make_engine

    put(spool_dir, "r.json", record_document("42"), uid=NOBODY.pw_uid)
    [record] = read_spool(spool_dir)
    assert accept_record(record, lambda job: "nobody")
    engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}", create=True)
    try:
        upgrade_engine(engine)
        repository = HistoryRepository(engine)
        repository.record_submission(to_submission_record(record))
        assert remove(record)
        stored = repository.get_submission("42")
    finally:
        engine.dispose()
    assert stored is not None
    assert (stored.user, stored.uid, stored.source) == ("nobody", NOBODY.pw_uid, "wrapper")
    assert (stored.model_name, stored.workload_class) == ("llama-7b", "llm")
    assert (stored.parallel_data, stored.parallel_pipeline, stored.parallel_tensor, stored.micro_batches) == (2, 1, 4, 8)
    assert stored.recurrence_group == "b" * 64 and stored.script_hash == "a" * 64
    assert stored.iterations_hint == 1000.0 and stored.command == "job.sh a"
    assert stored.submit_time_s == pytest.approx(record.spooled_at_s)


def test_a_serving_record_goes_into_the_history_repository(spool_dir, tmp_path):
    """serve-model and tp=auto travel spool -> SpoolRecord -> SubmissionRecord -> SQLite, and a
    later Slurm record of the same job (more trusted) keeps them."""
    from asrpt.db.migrate import upgrade_engine
    from asrpt.db.repository import HistoryRepository, SubmissionRecord
    from asrpt.db.session import make_engine

    serving = {"serve_model": "Llama-2-7b-HF", "parallel_tensor_auto": True, "workload_class": "llm"}
    put(spool_dir, "r.json", record_document("43", directives={"asrpt": serving}), uid=NOBODY.pw_uid)
    put(spool_dir, "s.json", record_document("44", directives={"asrpt": {"serve_model": "not-a-model", "parallel_tensor": 2}}), uid=NOBODY.pw_uid)
    put(spool_dir, "t.json", record_document("45", directives={"asrpt": {"parallel_tensor_auto": False}}), uid=NOBODY.pw_uid)
    records = {r.slurm_job_id: r for r in read_spool(spool_dir)}
    assert (records["43"].serve_model, records["43"].parallel_tensor_auto) == ("Llama-2-7b-HF", True)
    assert records["45"].parallel_tensor_auto is None  # False means "not asked": never stored as False
    engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}", create=True)
    try:
        upgrade_engine(engine)
        repository = HistoryRepository(engine)
        for record in records.values():
            assert accept_record(record, lambda job: "nobody")
            repository.record_submission(to_submission_record(record))
        repository.record_submission(
            SubmissionRecord(slurm_job_id="43", user="nobody", submit_time_s=1.7e9, source="slurm", accelerators=4, parallel_tensor=1)
        )
        stored = {job_id: repository.get_submission(job_id) for job_id in ("43", "44", "45")}
    finally:
        engine.dispose()
    assert stored["43"] is not None and stored["43"].source == "slurm"
    assert (stored["43"].serve_model, stored["43"].parallel_tensor_auto, stored["43"].accelerators) == ("Llama-2-7b-HF", True, 4)
    assert stored["44"] is not None
    assert (stored["44"].serve_model, stored["44"].parallel_tensor, stored["44"].parallel_tensor_auto) == ("not-a-model", 2, None)
    assert stored["45"] is not None and (stored["45"].serve_model, stored["45"].parallel_tensor_auto) == (None, None)


# ---- two real users -------------------------------------------------------------------------


def _python_for(user: str, env: dict[str, str]) -> str | None:
    """An interpreter ``user`` can run (the venv may live under root's 0700 home)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            ok = subprocess.run([candidate, "-c", "import asrpt.submit_wrapper.main"], user=user, env=env, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if ok.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def two_users():
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not available")
    suffix = uuid.uuid4().hex[:6]
    names = [f"asrptal{suffix}", f"asrptbo{suffix}"]
    created = []
    try:
        for name in names:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
            created.append(name)
        yield names
    finally:
        for name in created:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared_spool():
    """A spool outside pytest's 0700 tmp dirs, so that the test users can reach it."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="asrpt-spool-test-", dir="/tmp"))
    os.chmod(base, 0o755)
    spool_dir = base / "spool"
    spool_dir.mkdir()
    os.chmod(spool_dir, 0o1777)
    try:
        yield spool_dir
    finally:
        shutil.rmtree(base)


_FORGE = """
import json, os, sys
directory, job_id = sys.argv[1], sys.argv[2]
doc = {"format": "asrpt-submission", "version": 1, "slurm_job_id": job_id,
       "claimed_user": sys.argv[3], "directives": {"asrpt": {"iterations": 1}}}
fd = os.open(os.path.join(directory, "forged.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, json.dumps(doc).encode())
os.close(fd)
"""


def test_users_can_neither_forge_nor_tamper(two_users, shared_spool):
    alice, bob = two_users
    src = str(Path(__file__).resolve().parents[3] / "src")
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "LANG": "C.UTF-8", "ASRPT_CONFIG": "/nonexistent/asrpt.toml"}
    python = _python_for(alice, base)
    if python is None:
        pytest.skip("no Python interpreter the test users can run")
    script = shared_spool.parent / "job.sh"
    script.write_text("#!/bin/sh\n#ASRPT model=m iterations=500\ntrue\n")
    os.chmod(script, 0o644)

    # alice submits through the wrapper
    env = {**base, "USER": alice, "ASRPT_REAL_SBATCH": str(STUB), "ASRPT_SPOOL_DIR": str(shared_spool)}
    result = subprocess.run([python, "-m", "asrpt.submit_wrapper.main", "--parsable", str(script)], user=alice, env=env, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    alice_job = result.stdout.decode().strip()
    [alice_file] = list(shared_spool.glob("*.json"))
    st = alice_file.stat()
    assert st.st_uid == pwd.getpwnam(alice).pw_uid and stat.S_IMODE(st.st_mode) == 0o600

    # bob can neither read, rewrite, replace nor delete it
    attempts = {
        "read": f"open({str(alice_file)!r}).read()",
        "write": f"open({str(alice_file)!r}, 'w').write('{{}}')",
        "delete": f"import os; os.unlink({str(alice_file)!r})",
        "replace": f"import os; open('/tmp/asrpt-x-{bob}', 'w').close(); os.rename('/tmp/asrpt-x-{bob}', {str(alice_file)!r})",
    }
    for what, code in attempts.items():
        tried = subprocess.run([python, "-c", code], user=bob, env=base, capture_output=True, timeout=60)
        assert tried.returncode != 0 and b"PermissionError" in tried.stderr, what
    if os.path.exists(f"/tmp/asrpt-x-{bob}"):
        os.unlink(f"/tmp/asrpt-x-{bob}")

    # bob forges a record for alice's job, claiming to be alice
    forged = subprocess.run([python, "-c", _FORGE, str(shared_spool), alice_job, alice], user=bob, env=base, capture_output=True, timeout=60)
    assert forged.returncode == 0, forged.stderr

    slurm_users = {alice_job: alice}
    kept = [r for r in read_spool(shared_spool) if accept_record(r, slurm_users.get)]
    assert [(r.owner_name, r.slurm_job_id, r.model_name) for r in kept] == [(alice, alice_job, "m")]
    assert rejected(shared_spool) == ["forged.json"]


# ---- issue 16: records that would break every cycle -------------------------------------------

_DEEP = b'{"format": "asrpt-submission", "version": 1, "slurm_job_id": "1", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.mark.parametrize(
    "content",
    [
        _DEEP,
        record_document(directives={"asrpt": {"parallel_data": 2**70}}),
        record_document(directives={"asrpt": {"micro_batches": 2**31}}),
        record_document(claimed_uid=2**70),
        record_document(directives={"het_components": 2**70}),
    ],
    ids=["deeply-nested", "dp-2^70", "mb-2^31", "uid-2^70", "het-2^70"],
)
def test_records_the_history_could_not_hold_are_rejected_when_read(spool_dir, content):
    put(spool_dir, "x.json", content)
    assert read_spool(spool_dir) == []
    assert rejected(spool_dir) == ["x.json"]


def test_a_record_that_cannot_be_stored_is_set_aside_in_bad_and_kept(spool_dir):
    from asrpt.ingest.wrapper_spool import set_aside

    put(spool_dir, "a.json", record_document("7"))
    put(spool_dir, "b.json", record_document("8"))
    first, second = read_spool(spool_dir)
    assert set_aside(first, "storing it failed: DataError: too long")
    bad = spool_dir / spool.BAD_DIR
    assert sorted(p.name for p in bad.iterdir()) == ["a.json"]
    assert stat.S_IMODE(bad.stat().st_mode) == 0o700
    # bad/ is neither read as a record nor pruned with rejected/.
    assert [r.slurm_job_id for r in read_spool(spool_dir, rejected_max_age_s=0.0)] == ["8"]
    assert (bad / "a.json").exists() and rejected(spool_dir) == []
