"""job_submit.lua's records on the daemon side: parsing, trust, matching by AdminComment token,
the history row, and the merge with the wrapper's record in a real (SQLite) repository.

The last group runs contrib/slurm/job_submit.lua itself under a ``lua5.1`` interpreter with
a stand-in for slurmctld's ``slurm`` table and ``job_desc`` (skipped without ``lua5.1``; the
integration tests run it inside a real slurmctld).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrpt.db.migrate import upgrade_engine
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.db.session import make_engine
from asrpt.exceptions import DatabaseUnavailable
from asrpt.slurm.cli_backend import format_admin_comment, split_admin_comment
from asrpt.slurm.records import SlurmJob
from asrpt.ingest import plugin_spool
from asrpt.submit_wrapper import directives
from asrpt.ingest.wrapper_spool import RecordFormatError
from asrpt.ingest.plugin_spool import (
    PluginRecord,
    ingest_plugin_spool,
    match_plugin_records,
    parse_plugin_record,
    poly31x37,
    read_plugin_spool,
    to_submission_record,
    tokens_in,
)

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "contrib" / "slurm" / "job_submit.lua"
IS_ROOT = os.geteuid() == 0
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
NOBODY = pwd.getpwnam("nobody")
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root: plugin records are root's files")

TOKEN = "0123456789abcdef0123"
SCRIPT = """#!/bin/bash
#SBATCH --job-name=trainer --gres=gpu:a100:2
# a comment
#ASRPT model=llama-7b class=llm parallel=2x1x4 micro_batches=8 iterations=1000
srun python train.py
"""


def document(token: str = TOKEN, *, script: str | None = SCRIPT, **overrides) -> dict:
    data = None if script is None else script.encode("utf-8", "surrogateescape")
    doc = {
        "format": "asrpt-plugin-submission", "version": 1, "source": "plugin", "plugin_version": "1",
        "token": token, "submit_time_s": 1_700_000_000, "submit_uid": 1001, "uid": 1001, "gid": 1001,
        "user": "alice", "account": "ml", "name": "trainer", "partition": "a100", "qos": None,
        "work_dir": "/home/alice", "tres_per_node": "gres:gpu:a100:2", "tres_per_job": None,
        "tres_per_task": None, "tres_per_socket": None, "min_nodes": 2, "max_nodes": None,
        "num_tasks": None, "cpus_per_task": None, "time_limit_min": 30, "time_limit_unlimited": False,
        "array": None, "het_job_offset": None, "interactive": data is None, "priority_set": None,
        "script": None if data is None else {
            "bytes": len(data), "hash_alg": "poly31x37", "hash": poly31x37(data), "hash_bytes": len(data),
            "text": script, "truncated": False,
        },
        "asrpt_directives": ["model=llama-7b", "class=llm", "parallel=2x1x4", "micro_batches=8", "iterations=1000"],
    }  # fmt: skip
    doc.update(overrides)
    return doc


def parsed(doc: dict, path: str = "/spool/1-x.json") -> PluginRecord:
    return parse_plugin_record(doc, path=path, owner_uid=0, file_id=(1, 2, 3), spooled_at_s=1_700_000_001.0)


def slurm_job(job_id: str, token: str | None = TOKEN, *, user: str = "alice", state: str = "PENDING", **kw) -> SlurmJob:
    comment = f"asrpt-rec:{token}" if token else ""
    return SlurmJob(job_id=job_id, state=state, user=user, admin_comment=comment, **kw)


# ---- parsing ------------------------------------------------------------------------------


def test_a_record_parses_into_typed_fields():
    record = parsed(document())
    assert record.token == TOKEN and record.uid == 1001 and record.submit_uid == 1001 and record.user == "alice"
    assert record.partitions == ("a100",) and record.time_limit_s == 1800.0 and record.min_nodes == 2
    assert record.has_whole_script and record.script_data == SCRIPT.encode()
    assert record.asrpt_words[0] == "model=llama-7b"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "asrpt-submission"}, "format"),
        ({"version": 2}, "version"),
        ({"version": True}, "version"),
        ({"token": "XYZ"}, "token"),
        ({"token": None}, "token"),
        ({"token": "abc"}, "token"),
        ({"uid": -1}, "uid"),
        ({"uid": "0"}, "uid"),
        ({"uid": True}, "uid"),
        ({"time_limit_min": 1.5}, "time_limit_min"),
        ({"submit_time_s": "now"}, "submit_time_s"),
        ({"asrpt_directives": "model=x"}, "asrpt_directives"),
        ({"script": {"hash_alg": "md5", "hash": "0" * 16}}, "script.hash"),
        ({"script": "text"}, "script"),
        ({"name": "x" * 5000}, "too long"),
    ],
)
def test_malformed_records_are_refused(change, message):
    doc = document()
    doc.update(change)
    with pytest.raises(RecordFormatError, match=message):
        parsed(doc)
    with pytest.raises(RecordFormatError, match="JSON object"):
        parsed([document()])  # type: ignore[arg-type]


def test_nulls_mean_unknown():
    record = parsed(document(script=None, partition=None, time_limit_min=None, user=None, asrpt_directives=[]))
    assert record.partitions == () and record.time_limit_s is None and record.user is None
    assert record.interactive and record.script_data is None and record.script_identity() == (None, None)


# ---- what the daemon derives ----------------------------------------------------------------


def test_script_identity_and_directives_match_the_wrappers():
    record = parsed(document())
    info = directives.scan_script(SCRIPT)
    expected_group = hashlib.sha256(directives.recurrence_text(SCRIPT, info).encode()).hexdigest()
    assert record.script_identity() == (hashlib.sha256(SCRIPT.encode()).hexdigest(), expected_group)
    assert record.asrpt_fields() == info.asrpt


def test_a_wrap_script_is_identified_by_its_command_as_the_wrapper_does():
    generated = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\npython  train.py --lr 3\n"
    record = parsed(document(script=generated, asrpt_directives=[]))
    assert record.wrap_command == "python  train.py --lr 3"
    command = record.wrap_command.encode()
    group = hashlib.sha256(directives.wrap_recurrence_text("python  train.py --lr 3").encode()).hexdigest()
    assert record.script_identity() == (hashlib.sha256(command).hexdigest(), group)


def test_a_script_that_is_not_utf8_keeps_its_exact_bytes():
    raw = b"#!/bin/sh\necho \xff\xfe caf\xc3\xa9\n"
    record = parsed(document(script=raw.decode("utf-8", "surrogateescape")))
    assert record.script_data == raw
    assert record.script_identity()[0] == hashlib.sha256(raw).hexdigest()


def test_a_truncated_script_falls_back_to_the_plugins_hash_and_words():
    doc = document()
    doc["script"] = {**doc["script"], "text": SCRIPT[:20], "truncated": True}
    record = parsed(doc)
    assert record.script_data is None
    assert record.script_identity() == (f"poly31x37:{poly31x37(SCRIPT.encode())}", None)
    fields = record.asrpt_fields()
    assert fields["model"] == "llama-7b" and fields["parallel_tensor"] == 4 and fields["iterations"] == 1000


# ---- matching -------------------------------------------------------------------------------


def test_tokens_are_found_in_admin_comments_with_other_text():
    assert tokens_in(f"asrpt-rec:{TOKEN}") == [TOKEN]
    assert tokens_in(f"site note asrpt-rec:{TOKEN} more") == [TOKEN]
    assert tokens_in(f"xasrpt-rec:{TOKEN}") == []
    assert tokens_in(f"asrpt-rec:{TOKEN}zz") == []
    assert tokens_in("") == [] and tokens_in(None) == []


def test_the_tag_survives_the_daemons_own_admin_comment_part():
    written = format_admin_comment(f"asrpt-rec:{TOKEN}", {"held", "pin"}, "rank 3 of 40", max_chars=60)
    other, flags, text = split_admin_comment(written)
    assert tokens_in(written) == [TOKEN] and other == f"asrpt-rec:{TOKEN}" and flags == {"held", "pin"}
    # a long comment is cut from the end: the tag goes first, so it stays
    long = format_admin_comment(f"asrpt-rec:{TOKEN} " + "x" * 500, set(), "text", max_chars=80)
    assert tokens_in(long) == [TOKEN]


def test_records_match_jobs_by_token():
    a, b = parsed(document("a" * 20), "/s/a.json"), parsed(document("b" * 20), "/s/b.json")
    waiting = parsed(document("c" * 20), "/s/c.json")
    jobs = {"7": slurm_job("7", "a" * 20), "8": slurm_job("8", "b" * 20), "9": slurm_job("9", None)}
    assert match_plugin_records([a, b, waiting], jobs) == [("7", a), ("8", b)]


def test_array_tasks_share_their_submissions_record():
    record = parsed(document(array="0-2"))
    jobs = {"12": slurm_job("12"), "10": slurm_job("10", state="RUNNING"), "11": slurm_job("11")}
    assert [job_id for job_id, _ in match_plugin_records([record], jobs)] == ["10", "11", "12"]


def test_a_record_naming_another_user_than_slurm_is_not_matched(caplog):
    record = parsed(document())
    with caplog.at_level(logging.WARNING):
        assert match_plugin_records([record], {"7": slurm_job("7", user="bob")}) == []
    assert "belongs to bob" in caplog.text


# ---- the history row ------------------------------------------------------------------------


def test_the_submission_record_carries_slurms_identity_and_the_scripts_features():
    job = slurm_job("7", submit_time_s=1_700_000_000.25, node_count=2)
    row = to_submission_record(parsed(document()), "7", job)
    assert row.source == "plugin" and row.slurm_job_id == "7"
    assert (row.user, row.uid, row.account, row.job_name) == ("alice", 1001, "ml", "trainer")
    assert row.partitions == ("a100",) and row.time_limit_s == 1800.0
    assert (row.accelerators, row.accelerator_type) == (4, "a100")  # 2 per node x 2 nodes
    assert (row.parallel_data, row.parallel_pipeline, row.parallel_tensor, row.micro_batches) == (2, 1, 4, 8)
    assert (row.model_name, row.workload_class, row.iterations_hint) == ("llama-7b", "llm", 1000.0)
    assert row.submit_time_s == 1_700_000_000.25  # Slurm's own submit time
    assert row.script_hash == hashlib.sha256(SCRIPT.encode()).hexdigest() and row.recurrence_group


SERVING_SCRIPT = "#!/bin/bash\n#SBATCH --gres=gpu:a100:4\n#ASRPT serve-model=llama-2-7b tp=auto\nsrun ./serve\n"


@pytest.mark.parametrize("truncated", [False, True], ids=["whole-script", "plugin-words"])
def test_a_serving_job_reaches_the_history_row_as_the_wrappers_does(tmp_path, truncated):
    """Parity: the plugin path carries serve-model and tp=auto into the same columns as the
    wrapper path, from the whole script or from the words the plugin kept of a cut one."""
    doc = document(script=SERVING_SCRIPT, asrpt_directives=["serve-model=llama-2-7b", "tp=auto"])
    if truncated:
        doc["script"] = {**doc["script"], "text": SERVING_SCRIPT[:20], "truncated": True}
    record = parsed(doc)
    assert record.asrpt_fields() == directives.scan_script(SERVING_SCRIPT).asrpt
    row = to_submission_record(record, "7", slurm_job("7", node_count=1))
    assert (row.serve_model, row.parallel_tensor_auto, row.parallel_tensor) == ("llama-2-7b", True, None)
    repository = _repository(tmp_path)
    try:
        repository.record_submission(row)
        stored = repository.get_submission("7")
    finally:
        repository.close()
    assert stored is not None and (stored.serve_model, stored.parallel_tensor_auto) == ("llama-2-7b", True)


def test_a_training_job_has_no_serving_fields():
    row = to_submission_record(parsed(document()), "7", slurm_job("7"))
    assert (row.serve_model, row.parallel_tensor_auto) == (None, None)


@pytest.mark.parametrize(
    ("tres", "expected"),
    [
        ({"tres_per_node": "gres/gpu:v100:3", "min_nodes": None}, (3, "v100")),  # 24.11 spelling
        ({"tres_per_node": "gres:npu:8", "min_nodes": 2}, (16, None)),
        ({"tres_per_node": None, "tres_per_job": "gres:gpu:5"}, (5, None)),
        ({"tres_per_node": None, "tres_per_task": "gres/gpu:1", "num_tasks": 4}, (4, None)),
        ({"tres_per_node": None, "tres_per_task": "gres/gpu=1", "num_tasks": 4}, (4, None)),  # 24.11
        ({"tres_per_node": "gres/gpu:a100=2", "min_nodes": None}, (2, "a100")),
        ({"tres_per_node": "cpu=4,gres:gpu:1g.10gb:2", "min_nodes": 3}, (6, "1g.10gb")),
        ({"tres_per_node": "gres:license_x:2"}, (None, None)),
        ({"tres_per_node": "(null"}, (None, None)),
    ],
)
def test_accelerators_in_either_slurm_spelling(tres, expected):
    row = to_submission_record(parsed(document(**tres)), "7", slurm_job("7"))
    assert (row.accelerators, row.accelerator_type) == expected


def test_what_the_request_left_open_comes_from_slurm():
    row = to_submission_record(parsed(document(partition=None, user=None, script=None)), "7",
                               slurm_job("7", partitions=("gpu",), submit_time_s=1_700_000_005.0))
    assert row.partitions == ("gpu",) and row.user == "alice" and row.submit_time_s == 1_700_000_005.0
    alone = to_submission_record(parsed(document(user=None, uid=0)), "7")
    assert alone.user == "root" and alone.submit_time_s == 1_700_000_000.0


def _repository(tmp_path: Path) -> HistoryRepository:
    engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}", create=True)
    upgrade_engine(engine)
    return HistoryRepository(engine)


@pytest.mark.parametrize("plugin_first", [True, False], ids=["plugin-first", "wrapper-first"])
def test_plugin_and_wrapper_records_of_one_job_make_one_row(tmp_path, plugin_first):
    repository = _repository(tmp_path)
    try:
        plugin_row = to_submission_record(parsed(document()), "7", slurm_job("7", node_count=1))
        # What the wrapper (the user's process) says: other identity, plus what only it knows.
        wrapper_row = SubmissionRecord(
            slurm_job_id="7", user="mallory", uid=666, submit_time_s=1.0, source="wrapper",
            job_name="renamed", partitions=("npu",), time_limit_s=1.0, accelerators=64,
            command="train.sh --lr 3e-4", model_name="llama-7b",
            recurrence_group=plugin_row.recurrence_group, script_hash=plugin_row.script_hash,
        )  # fmt: skip
        for row in ((plugin_row, wrapper_row) if plugin_first else (wrapper_row, plugin_row)):
            repository.record_submission(row)
        stored = repository.get_submission("7")
        assert stored is not None and stored.source == "plugin"
        assert (stored.user, stored.uid, stored.job_name, stored.partitions) == ("alice", 1001, "trainer", ("a100",))
        assert (stored.time_limit_s, stored.accelerators, stored.accelerator_type) == (1800.0, 4, "a100")
        assert stored.submit_time_s == plugin_row.submit_time_s
        assert stored.command == "train.sh --lr 3e-4"  # only the wrapper knew it
        assert stored.iterations_hint == 1000.0 and stored.recurrence_group == plugin_row.recurrence_group
        assert len(repository.history_rows()) == 1
    finally:
        repository.close()


# ---- the spool ------------------------------------------------------------------------------


def make_spool(tmp_path: Path) -> Path:
    spool_dir = tmp_path / "plugin"
    spool_dir.mkdir(mode=0o700)
    os.chmod(spool_dir, 0o700)
    return spool_dir


def put(spool_dir: Path, name: str, doc: object, *, owner: int | None = None, mode: int = 0o644) -> Path:
    path = spool_dir / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


@needs_root
def test_only_root_owned_regular_files_are_read(tmp_path, caplog):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-good.json", document("a" * 20))
    put(spool_dir, "2-forged.json", document("b" * 20), owner=NOBODY.pw_uid)
    put(spool_dir, "3-bad.json", "{not json")
    put(spool_dir, "4-other.json", {"format": "asrpt-submission", "version": 1})
    put(spool_dir, "5-name.txt", document("c" * 20))
    (spool_dir / "6-link.json").symlink_to(spool_dir / "1-good.json")
    put(spool_dir, "7-linked.json", document("d" * 20))
    os.link(spool_dir / "7-linked.json", tmp_path / "hardlink")
    put(spool_dir, ".tmp-inflight", "{")
    with caplog.at_level(logging.WARNING):
        [record] = read_plugin_spool(spool_dir)
    assert record.token == "a" * 20
    assert sorted(os.listdir(spool_dir)) == [".tmp-inflight", "1-good.json", "rejected"]
    assert len(os.listdir(spool_dir / "rejected")) == 6
    assert "owned by uid" in caplog.text and "symbolic link" in caplog.text and "hard links" in caplog.text


@needs_root
@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664])
def test_a_record_others_could_have_written_is_not_read(tmp_path, caplog, mode):
    """The wrapper's reader refused a record writable by others and the plugin's did not (a
    0666 record in a 0755 spool was accepted): both now read through one secure open."""
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-open.json", document("a" * 20), mode=mode)
    with caplog.at_level(logging.WARNING):
        assert read_plugin_spool(spool_dir) == []
    assert "writable by others" in caplog.text


@needs_root
@pytest.mark.parametrize("problem", ["missing", "not-a-dir", "foreign-owner", "world-writable", "symlink"])
def test_an_unsafe_spool_directory_is_not_read(tmp_path, caplog, problem):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-good.json", document())
    target = spool_dir
    if problem == "missing":
        target = tmp_path / "nowhere"
    elif problem == "not-a-dir":
        target = tmp_path / "file"
        target.write_text("")
    elif problem == "foreign-owner":
        os.chown(spool_dir, NOBODY.pw_uid, NOBODY.pw_gid)
    elif problem == "world-writable":
        os.chmod(spool_dir, 0o777)
    else:
        target = tmp_path / "link"
        target.symlink_to(spool_dir)
    with caplog.at_level(logging.WARNING):
        assert read_plugin_spool(target) == []
    assert "its records are not read" in caplog.text
    assert (spool_dir / "1-good.json").exists()  # nothing was moved


@needs_root
def test_another_trusted_owner_can_be_configured(tmp_path):
    spool_dir = make_spool(tmp_path)
    os.chown(spool_dir, NOBODY.pw_uid, NOBODY.pw_gid)
    put(spool_dir, "1-x.json", document(), owner=NOBODY.pw_uid)
    assert len(read_plugin_spool(spool_dir, trusted_uids=plugin_spool.uids_of(["nobody"]))) == 1
    assert plugin_spool.uids_of(["root", "0", "no-such-user-asrpt"]) == (0, 0)


@needs_root
def test_the_cycle_stores_matches_waits_and_expires(tmp_path):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-a.json", document("a" * 20))
    put(spool_dir, "2-b.json", document("b" * 20))
    put(spool_dir, "3-array.json", document("c" * 20, array="0-3"))
    stored: list[SubmissionRecord] = []
    jobs = {"7": slurm_job("7", "a" * 20), "20": slurm_job("20", "c" * 20, state="RUNNING"),
            "21": slurm_job("21", "c" * 20)}  # fmt: skip
    result = ingest_plugin_spool(spool_dir, jobs, stored.append)
    assert (result.stored, result.waiting, result.expired) == (3, 1, 0)
    assert sorted(r.slurm_job_id for r in stored) == ["20", "21", "7"]
    # the plain record is gone; the array waits for its pending task; b waits for its job
    assert sorted(p.name for p in spool_dir.glob("*.json")) == ["2-b.json", "3-array.json"]
    jobs["21"] = slurm_job("21", "c" * 20, state="RUNNING")
    ingest_plugin_spool(spool_dir, jobs, stored.append)
    assert sorted(p.name for p in spool_dir.glob("*.json")) == ["2-b.json"]
    result = ingest_plugin_spool(spool_dir, {}, stored.append, max_age_s=0.0, now_s=os.stat(spool_dir / "2-b.json").st_ctime + 1)
    assert result.expired == 1 and not list(spool_dir.glob("*.json")) and len(os.listdir(spool_dir / "rejected")) == 1


@needs_root
def test_a_failing_database_keeps_the_record(tmp_path):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-a.json", document())

    def broken(_record: SubmissionRecord) -> None:
        # What the repository raises for a locked or unreachable database.
        raise DatabaseUnavailable("sqlite:///x.db", "database is locked")

    with pytest.raises(DatabaseUnavailable):
        ingest_plugin_spool(spool_dir, {"7": slurm_job("7")}, broken)
    assert (spool_dir / "1-a.json").exists()


@needs_root
def test_a_record_the_database_refuses_is_set_aside_and_the_others_stored(tmp_path):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-a.json", document("a" * 20))
    put(spool_dir, "2-b.json", document("b" * 20))
    stored: list[SubmissionRecord] = []

    def record(submission: SubmissionRecord) -> None:
        if submission.slurm_job_id == "7":
            raise ValueError("value too long for type character varying(256)")
        stored.append(submission)

    jobs = {"7": slurm_job("7", "a" * 20), "8": slurm_job("8", "b" * 20)}
    result = ingest_plugin_spool(spool_dir, jobs, record)
    assert result.stored == 1 and [s.slurm_job_id for s in stored] == ["8"]
    assert os.listdir(spool_dir / "bad") == ["1-a.json"] and not list(spool_dir.glob("*.json"))


@needs_root
def test_deeply_nested_json_is_rejected_not_raised(tmp_path):
    spool_dir = make_spool(tmp_path)
    put(spool_dir, "1-a.json", '{"format": "asrpt-plugin-submission", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert read_plugin_spool(spool_dir) == []
    assert os.listdir(spool_dir / "rejected") == ["1-a.json"]


# ---- job_submit.lua under a stand-in slurmctld ----------------------------------------------------

LUA = shutil.which("lua5.1") or shutil.which("lua5.4") or shutil.which("lua5.3") or shutil.which("lua")
needs_lua = pytest.mark.skipif(LUA is None, reason="no Lua interpreter (apt-get install lua5.1)")

HARNESS = r"""
-- lua HARNESS PLUGIN SPOOL_DIR SET_PRIORITY FIELDS_FILE [SETTINGS [RUNS [REMOVE_BEFORE_RUN_2]]]:
-- run slurm_job_submit RUNS times (default once) in one Lua state, as slurmctld does.
-- SETTINGS: "NAME=value;NAME=value" replaces those "local NAME = ..." lines of the plugin.
local plugin, spool, set_priority, fields_file = arg[1], arg[2], arg[3], arg[4]
local settings, runs, remove_before_2 = arg[5] or "", tonumber(arg[6] or "1"), arg[7]
local logged = {}
slurm = {SUCCESS = 0, ERROR = -1,
         log_info = function(fmt, ...) logged[#logged + 1] = string.format(fmt, ...) end}
local src = io.open(plugin, "rb"):read("*a")
src = src:gsub('\nlocal SPOOL_DIR = "[^\n]*', '\nlocal SPOOL_DIR = "' .. spool .. '"', 1)
src = src:gsub('\nlocal SET_PRIORITY = [a-z]+', '\nlocal SET_PRIORITY = ' .. set_priority, 1)
for name, value in settings:gmatch("([%w_]+)=([^;]*)") do
  local count
  src, count = src:gsub('\nlocal ' .. name .. ' = [^\n]*', '\nlocal ' .. name .. ' = ' .. value, 1)
  assert(count == 1, "no setting " .. name)
end
local load_chunk = loadstring or load
local chunk = assert(load_chunk(src))
assert(chunk() == 0, "the script must return slurm.SUCCESS when loaded")
-- FIELDS_FILE: "key\tvalue" lines; numbers as numbers; "script" is read from FIELDS_FILE.script.
local store = {}
for line in io.lines(fields_file) do
  local key, value = line:match("^([^\t]+)\t(.*)$")
  store[key] = tonumber(value) or value
end
local sf = io.open(fields_file .. ".script", "rb")
if sf then store.script = sf:read("*a"); sf:close() end
local job_desc = setmetatable({}, {__index = store, __newindex = function(_, k, v) store[k] = v end})
local comment, priority = store.admin_comment, store.priority
for run = 1, runs do
  if run == 2 and remove_before_2 ~= "" then os.remove(remove_before_2) end
  store.admin_comment, store.priority = comment, priority
  local rc = slurm_job_submit(job_desc, {}, store.user_id)
  local rc2 = slurm_job_modify(job_desc, {}, {}, 0)
  io.write("rc=", tostring(rc), "\nmodify=", tostring(rc2), "\nadmin_comment=", tostring(store.admin_comment),
           "\npriority=", tostring(store.priority), "\nbegin_time=", tostring(store.begin_time),
           "\nended_s=", tostring(os.time()), "\n")
  io.flush()
end
for _, l in ipairs(logged) do io.write("log=", l, "\n") end
"""


def run_plugin(tmp_path: Path, spool_dir: Path, *, script: bytes | None, set_priority: bool = False,
               settings: str = "", runs: int = 1, remove_before_run_2: Path | None = None,
               timeout_s: float = 30, on_timeout=None, **fields) -> dict[str, list[str]]:  # fmt: skip
    harness = tmp_path / "harness.lua"
    harness.write_text(HARNESS)
    values = {"user_id": 1001, "group_id": 1001, "user_name": "alice", "name": "trainer", "partition": "a100",
              "tres_per_node": "gres:gpu:a100:2", "time_limit": 30, "priority": 4294967294,
              "min_nodes": 4294967294, "num_tasks": 4294967294, "cpus_per_task": 65534,
              "het_job_offset": 4294967294, **fields}  # fmt: skip
    fields_file = tmp_path / "fields.tsv"
    fields_file.write_text("".join(f"{k}\t{v}\n" for k, v in values.items() if v is not None))
    script_file = Path(f"{fields_file}.script")
    if script is None:
        script_file.unlink(missing_ok=True)
    else:
        script_file.write_bytes(script)
    argv = [LUA, str(harness), str(PLUGIN), str(spool_dir), "true" if set_priority else "false", str(fields_file),
            settings, str(runs), str(remove_before_run_2 or "")]  # fmt: skip
    lua = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = lua.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        if on_timeout is not None:
            on_timeout()  # e.g. thaw a frozen file system: a process waiting on it cannot be killed
        lua.kill()
        lua.communicate()
        pytest.fail(f"the plugin did not return within {timeout_s} s: it blocked")
    assert lua.returncode == 0, stderr
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def fs_type(path: Path) -> str:
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def mem_spool() -> Iterator[Path]:
    """A spool directory on tmpfs (/dev/shm), where the plugin writes by default."""
    if not Path("/dev/shm").is_dir() or fs_type(Path("/dev/shm")) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="asrpt-test-", dir="/dev/shm"))
    try:
        yield make_spool(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PATH": SBIN_PATH})
    if done.returncode != 0:
        pytest.skip(f"{' '.join(argv)} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def mounted(tmp_path: Path, kind: str) -> Iterator[Path]:
    """A fresh file system mounted at tmp_path/kind: "ext4" (a loop image) or "tiny-tmpfs" (64 KiB)."""
    if not IS_ROOT:
        pytest.skip("mounting needs root")
    point = tmp_path / kind
    point.mkdir()
    if kind == "ext4":
        image = tmp_path / "spool.img"
        with open(image, "wb") as f:
            f.truncate(16 << 20)
        _sh("mkfs.ext4", "-q", "-F", str(image))
        _sh("mount", "-o", "loop", str(image), str(point))
    else:
        _sh("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "asrpt-test", str(point))
    try:
        yield point
    finally:
        subprocess.run(["fsfreeze", "-u", str(point)], capture_output=True, env={**os.environ, "PATH": SBIN_PATH})
        subprocess.run(["umount", str(point)], capture_output=True, env={**os.environ, "PATH": SBIN_PATH})


@needs_lua
@needs_root
def test_lua_writes_a_record_the_daemon_reads(tmp_path, mem_spool):
    spool_dir = mem_spool
    raw = SCRIPT.encode() + b"echo \xff\x01 \"q\" \\ tab\t\n#ASRPT late=1\n"
    out = run_plugin(tmp_path, spool_dir, script=raw, admin_comment="site text")
    assert out["rc"] == ["0"] and out["modify"] == ["0"] and "log" not in out
    [record] = read_plugin_spool(spool_dir)
    assert out["admin_comment"] == [f"asrpt-rec:{record.token} site text"]
    assert len(record.token) == 20 and record.uid == 1001 and record.user == "alice"
    assert record.partitions == ("a100",) and record.time_limit_s == 1800.0
    assert record.min_nodes is None and record.num_tasks is None and record.cpus_per_task is None
    assert record.script_data == raw and record.script_poly_hash == poly31x37(raw)
    assert record.asrpt_words == ("model=llama-7b", "class=llm", "parallel=2x1x4", "micro_batches=8", "iterations=1000")
    assert out["priority"] == ["4294967294"] and record.priority_set is None
    assert not [p for p in os.listdir(spool_dir) if p.startswith(".")]


@needs_lua
@needs_root
def test_lua_hashes_and_copies_only_a_bounded_prefix(tmp_path, mem_spool):
    spool_dir = mem_spool
    raw = b"#!/bin/sh\n#ASRPT iterations=5\n" + b"x" * 70_000 + b"\n"
    run_plugin(tmp_path, spool_dir, script=raw)
    [record] = read_plugin_spool(spool_dir)
    assert record.script_truncated and record.script_bytes == len(raw) and record.script_hash_bytes == 65536
    assert record.script_poly_hash == poly31x37(raw[:65536]) and len(record.script_text or "") == 65536
    assert record.asrpt_fields() == {"iterations": 5}


@needs_lua
@needs_root
def test_lua_records_interactive_jobs_without_a_script(tmp_path, mem_spool):
    spool_dir = mem_spool
    run_plugin(tmp_path, spool_dir, script=None, time_limit=4294967295, name="interactive")
    [record] = read_plugin_spool(spool_dir)
    assert record.interactive and record.script_text is None and record.time_limit_unlimited
    assert record.time_limit_s is None and record.asrpt_words == ()


@needs_lua
@needs_root
def test_lua_marks_later_heterogeneous_components_as_unknown(tmp_path, mem_spool):
    spool_dir = mem_spool
    run_plugin(tmp_path, spool_dir, script=None, het_job_offset=1)
    run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), het_job_offset=0)
    records = sorted(read_plugin_spool(spool_dir), key=lambda r: r.het_job_offset or 0)
    assert [(r.het_job_offset, r.interactive) for r in records] == [(0, False), (1, None)]


@needs_lua
@pytest.mark.parametrize("broken", ["file", "missing"])
def test_lua_with_a_broken_spool_lets_the_job_through_untouched(tmp_path, mem_spool, broken):
    spool_dir = mem_spool.parent / "spool"
    if broken == "file":
        spool_dir.write_text("not a directory")
    out = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), admin_comment="keep me")
    assert out["rc"] == ["0"] and out["admin_comment"] == ["keep me"]
    assert len(out["log"]) == 1 and "cannot create a record" in out["log"][0]


@needs_lua
def test_lua_never_writes_to_a_spool_on_disk(tmp_path):
    """A disk can stall (fsfreeze, a failing disk): such a spool is not written at all."""
    if fs_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("tmp_path is on tmpfs")
    spool_dir = make_spool(tmp_path)
    out = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), admin_comment="keep me", runs=2)
    assert out["rc"] == ["0", "0"] and out["admin_comment"] == ["keep me", "keep me"]
    assert os.listdir(spool_dir) == []
    [line] = out["log"]  # rate-limited: the second drop is counted into the next line
    assert "record dropped" in line and "not on tmpfs" in line and "1 dropped, 0 written" in line


@needs_lua
def test_lua_returns_at_once_when_the_spool_is_frozen(tmp_path):
    """The reported defect: with the spool file system frozen, the write blocked slurmctld."""
    with mounted(tmp_path, "ext4") as point:
        spool_dir = make_spool(point)
        _sh("fsfreeze", "-f", str(point))
        started = time.monotonic()
        out = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), admin_comment="keep me", timeout_s=10,
                         on_timeout=lambda: subprocess.run(["fsfreeze", "-u", str(point)], env={**os.environ, "PATH": SBIN_PATH}))  # fmt: skip
        elapsed_s = time.monotonic() - started
        _sh("fsfreeze", "-u", str(point))
        assert out["rc"] == ["0"] and out["admin_comment"] == ["keep me"] and elapsed_s < 2
        assert "not on tmpfs" in out["log"][0]
        assert os.listdir(spool_dir) == []


@needs_lua
def test_lua_stops_writing_for_a_while_after_a_slow_write(tmp_path):
    """MEMORY_FS_ONLY = false: a write that stalls for seconds pauses writing for PAUSE_S."""
    with mounted(tmp_path, "ext4") as point:
        spool_dir = make_spool(point)
        _sh("fsfreeze", "-f", str(point))
        thaw = threading.Timer(3.0, lambda: subprocess.run(["fsfreeze", "-u", str(point)], env={**os.environ, "PATH": SBIN_PATH}))  # fmt: skip
        thaw.start()
        try:
            out = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), settings="MEMORY_FS_ONLY=false", runs=3,
                             timeout_s=20)  # fmt: skip
        finally:
            thaw.join()
        [record] = read_plugin_spool(spool_dir)  # the slow one went through; the next two were dropped
        assert out["admin_comment"] == [f"asrpt-rec:{record.token}", "nil", "nil"]
        assert int(out["ended_s"][2]) - int(out["ended_s"][0]) <= 1  # the dropped ones did not wait
        assert re.search(r"took [2-9] s or more: not writing for 300 s", out["log"][0]), out["log"]
        assert not (spool_dir / ".status").exists()  # not written while paused


@needs_lua
@needs_root
def test_lua_counts_drops_in_a_status_file_once_it_can(tmp_path):
    """A full tmpfs: the record is dropped at once (ENOSPC) and counted; the next write that
    succeeds also writes SPOOL_DIR/.status, which the daemon's ingest ignores."""
    with mounted(tmp_path, "tiny-tmpfs") as point:
        filler = point / "filler"
        with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"x" * 4096)
        out = run_plugin(tmp_path, point, script=SCRIPT.encode(), runs=2, remove_before_run_2=filler)
        assert out["rc"] == ["0", "0"] and out["admin_comment"][0] == "nil"
        assert "record dropped" in out["log"][0] and "cannot" in out["log"][0]
        status = json.loads((point / ".status").read_text())
        assert (status["format"], status["written"], status["dropped"]) == ("asrpt-plugin-status", 1, 1)
        assert status["dropped_by"] == {"write_failed": 1} and status["last_drop_reason"] == "write_failed"
        [record] = read_plugin_spool(point)
        assert out["admin_comment"][1] == f"asrpt-rec:{record.token}"


@needs_lua
def test_lua_priority_option_lowers_only_unset_priorities(tmp_path, mem_spool):
    spool_dir = mem_spool
    assert run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), set_priority=True)["priority"] == ["1"]
    held = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), set_priority=True, priority=0)
    assert held["priority"] == ["0"]  # a held job stays held
    admin = run_plugin(tmp_path, spool_dir, script=SCRIPT.encode(), set_priority=True, priority=5000)
    assert admin["priority"] == ["5000"]
    documents = [json.loads(p.read_text()) for p in sorted(spool_dir.glob("*.json"))]
    assert sorted(str(d["priority_set"]) for d in documents) == ["1", "None", "None"]


def test_the_daemon_config_names_the_plugin_spool():
    from asrpt.daemon.config import parse_config

    config = parse_config({"spool": {"plugin_dir": "/var/spool/asrpt-plugin", "plugin_owners": ["slurm"]}}, {})
    assert (config.spool.plugin_dir, config.spool.plugin_owners) == ("/var/spool/asrpt-plugin", ("slurm",))
    assert parse_config({}, {}).spool.plugin_dir == ""  # off unless configured
    env = {"ASRPT_SPOOL_PLUGIN_DIR": "/x", "ASRPT_SPOOL_PLUGIN_OWNERS": "root,slurm"}
    assert parse_config({}, env).spool.plugin_owners == ("root", "slurm")


SPREAD = dict(tres_per_node=None, tres_per_job="gres:gpu:8", begin_time=0)


@needs_lua
@needs_root
def test_lua_lets_a_job_slurm_could_split_wait_a_bounded_time_for_the_daemons_first_look(tmp_path, mem_spool):
    """--gpus=8 may be split 4+4 by Slurm before asrptd's cycle sees it: the plugin sets a
    begin time FIRST_LOOK_S ahead and marks it "asrpt-look" (the daemon clears both)."""
    out = run_plugin(tmp_path, mem_spool, script=SCRIPT.encode(), **SPREAD)
    [record] = read_plugin_spool(mem_spool)
    assert out["rc"] == ["0"] and out["admin_comment"] == [f"asrpt-rec:{record.token} asrpt-look"]
    assert 58 <= int(out["begin_time"][0]) - int(out["ended_s"][0]) <= 60  # now + 60 s
    out = run_plugin(tmp_path, mem_spool, script=SCRIPT.encode(), **{**SPREAD, "tres_per_job": "gres/gpu:a100:2"})
    assert out["admin_comment"][0].endswith(" asrpt-look")  # 24.11's spelling
    out = run_plugin(tmp_path, mem_spool, script=SCRIPT.encode(), **{**SPREAD, "tres_per_job": None,
                                                                      "tres_per_task": "gres:gpu:1", "num_tasks": 4})
    assert out["admin_comment"][0].endswith(" asrpt-look")


@needs_lua
@needs_root
@pytest.mark.parametrize("fields", [
    dict(tres_per_job=None, tres_per_node="gres:gpu:a100:8"),  # per node: Slurm's shape is fixed
    dict(max_nodes=1),                                         # -N 1: never split
    dict(tres_per_job="gres:gpu:1"),                           # one accelerator cannot be split
    dict(tres_per_job="gres:mps:100"),                         # not an accelerator
    dict(begin_time=4102444800),                               # the user's own --begin is kept
], ids=["per-node", "one-node", "one-gpu", "not-accelerator", "own-begin"])
def test_lua_does_not_delay_jobs_slurm_cannot_split_or_that_chose_a_begin_time(tmp_path, mem_spool, fields):
    out = run_plugin(tmp_path, mem_spool, script=SCRIPT.encode(), **{**SPREAD, **fields})
    assert "asrpt-look" not in out["admin_comment"][0]
    assert out["begin_time"] == [str(fields.get("begin_time", 0))]


@needs_lua
@needs_root
def test_lua_never_delays_an_interactive_job_and_a_failing_first_look_costs_nothing(tmp_path, mem_spool):
    out = run_plugin(tmp_path, mem_spool, script=None, **SPREAD)  # srun/salloc: someone is waiting
    assert out["begin_time"] == ["0"] and "asrpt-look" not in out["admin_comment"][0]
    out = run_plugin(tmp_path, mem_spool, script=SCRIPT.encode(), settings='FIRST_LOOK_S="x"', **SPREAD)
    assert out["rc"] == ["0"] and out["begin_time"] == ["0"]
    assert any("first-look option failed" in line for line in out["log"])
    assert out["admin_comment"][0].startswith("asrpt-rec:")  # the record is still written
