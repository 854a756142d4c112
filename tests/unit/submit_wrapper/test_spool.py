"""Spool writes: atomic (a reader sees a whole record or nothing), mode 0600, no symlink tricks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from asrpt.submit_wrapper import spool


@pytest.fixture
def spool_dir(tmp_path):
    path = tmp_path / "spool"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277, 0o777])
def test_records_are_mode_0600_whatever_the_umask(spool_dir, umask):
    old = os.umask(umask)
    try:
        path = spool.write_record(str(spool_dir), "r.json", b'{"a": 1}')
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o7777 == 0o600
    with open(path, "rb") as handle:
        assert handle.read() == b'{"a": 1}'


def test_write_leaves_no_temp_file_and_names_are_hidden_until_complete(spool_dir):
    spool.write_record(str(spool_dir), "r.json", b"x" * 1_000_000)
    assert [p.name for p in spool_dir.iterdir()] == ["r.json"]
    assert spool.TEMP_PREFIX.startswith(".")


def test_failed_write_removes_its_temp_file(spool_dir, monkeypatch):
    def broken_write(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spool.os, "write", broken_write)
    with pytest.raises(OSError, match="No space"):
        spool.write_record(str(spool_dir), "r.json", b"{}")
    assert list(spool_dir.iterdir()) == []


def test_a_planted_symlink_at_the_temp_name_is_not_followed(spool_dir, tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    monkeypatch.setattr(spool.os, "urandom", lambda n: b"\0" * n)
    os.symlink(victim, spool_dir / f"{spool.TEMP_PREFIX}{os.getpid()}-{'00' * 6}")
    with pytest.raises(FileExistsError):
        spool.write_record(str(spool_dir), "r.json", b"{}")
    assert victim.read_text() == "precious"
    assert not (spool_dir / "r.json").exists()


def test_missing_directory_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        spool.write_record(str(tmp_path / "absent"), "r.json", b"{}")


_WRITER = """
import sys
from asrpt.submit_wrapper import spool
directory, worker = sys.argv[1], int(sys.argv[2])
payload = ('{"worker": %d, "pad": "' % worker + 'p' * 200_000 + '"}').encode()
for i in range(20):
    spool.write_record(directory, "w%d-%d.json" % (worker, i), payload)
"""


def test_concurrent_writers_and_a_reader_never_see_a_partial_record(spool_dir):
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(spool_dir), str(w)]) for w in range(8)]
    seen = 0
    while any(w.poll() is None for w in writers):
        for path in spool_dir.glob("*.json"):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            json.loads(data)  # whole or absent, never partial
            seen += 1
    assert all(w.wait(timeout=120) == 0 for w in writers)
    assert len(list(spool_dir.glob("*.json"))) == 8 * 20
    assert not [p for p in spool_dir.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "job_id, fragment",
    [("42", "-job42.json"), ("../../etc/x", "-jobetcx.json"), ("", "-jobunknown.json")],
)
def test_record_names_are_safe(job_id, fragment):
    name = spool.record_name(job_id, 123, 9, "abc")
    assert name.startswith("123-9-abc") and name.endswith(fragment) and "/" not in name


def test_build_record_makes_every_string_encodable():
    bad = os.fsdecode(b"\xff")
    record = spool.build_record(
        job_id="1",
        cluster=None,
        submit_time_s=1.0,
        cwd="/home/" + bad,
        args=["-J", bad, "y" * (spool.MAX_ARG_CHARS + 5)],
        script={},
        recurrence_group=None,
        directives={},
        claimed_user=bad,
        claimed_uid=1,
        hostname="h",
        wrapper_version="0",
    )
    json.dumps(record, ensure_ascii=False).encode("utf-8")
    assert record["cwd"] == "/home/\ufffd"
    assert record["argv"][1] == "\ufffd" and len(record["argv"][2]) == spool.MAX_ARG_CHARS
    assert record["argv_truncated"] is True


def test_truncate_utf8_never_splits_a_character():
    text, cut = spool.truncate_utf8("aé" * 10, 4)
    assert (text, cut) == ("aéa", True)
    assert spool.truncate_utf8("abc", 3) == ("abc", False)


# ---- the record writer's JSON ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text())
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(_JSON)
def test_to_json_writes_what_json_dumps_writes(value):
    assert spool.to_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: 2}, object(), b"bytes"])
def test_to_json_refuses_what_json_cannot_hold(value):
    with pytest.raises((ValueError, TypeError)):
        spool.to_json(value)


def test_sha256_without_hashlib_matches_hashlib():
    import hashlib

    from asrpt.submit_wrapper.main import sha256_hex

    assert sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_bounded_write_writes_the_record_and_reports_errors(tmp_path):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    path = spool.write_record_bounded(str(spool_dir), "r.json", b'{"a": 1}')
    assert path == str(spool_dir / "r.json") and (spool_dir / "r.json").read_bytes() == b'{"a": 1}'
    with pytest.raises(FileNotFoundError):
        spool.write_record_bounded(str(tmp_path / "absent"), "r.json", b"{}")
    os.chmod(spool_dir, 0o500)
    try:
        if os.getuid() != 0:
            with pytest.raises(PermissionError):
                spool.write_record_bounded(str(spool_dir), "s.json", b"{}")
    finally:
        os.chmod(spool_dir, 0o700)


def test_bounded_write_gives_up_on_a_stalled_file_system(tmp_path, monkeypatch):
    import time

    fifo = tmp_path / "frozen"
    os.mkfifo(fifo)

    def stalled(spool_dir, name, payload):
        os.open(fifo, os.O_WRONLY)  # blocks: no reader
        return "never"

    monkeypatch.setattr(spool, "write_record", stalled)
    start = time.monotonic()
    with pytest.raises(spool.WriteTimeout):
        spool.write_record_bounded(str(tmp_path), "r.json", b"{}", timeout_s=0.2)
    assert time.monotonic() - start < 2
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the child go
