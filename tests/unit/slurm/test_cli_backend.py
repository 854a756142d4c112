"""SlurmCliBackend on recorded outputs, with a fake runner that plays slurmctld's part.

``FakeSlurm`` serves the recorded ``squeue --json`` / node JSON of either version and applies
the backend's ``scontrol update/hold/release`` calls to its copy of the jobs the way
slurmctld does (verified on the test-bed, see ../shared/slurm-testbed/NOTES.md): a hold sets
priority 0 and JobHeldAdmin, a release resets the priority to a default below asrpt's range.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.model import SPREAD, Decision, Partition, Placement, RequestShape
from asrpt.exceptions import ConfigError, SlurmOutputMalformed, SlurmUnreachable
from asrpt.slurm.cli_backend import (
    PRIORITY_AUTO_MAX,
    PRIORITY_MAX,
    SlurmBackendConfig,
    SlurmCliBackend,
    assign_priorities,
    format_admin_comment,
    parse_hints,
    split_admin_comment,
)
from asrpt.slurm.runner import Outcome, RunResult, command_key

from .conftest import fixture_text


def apply(backend, decision, **kwargs):
    """Apply and return what was written."""
    backend.apply(decision, **kwargs)
    return backend.last_apply


PARTITIONS = (
    Partition(name="a100", accelerator="a100", intra_node_gbps=300.0, inter_node_gbps=25.0),
    Partition(name="v100", accelerator="v100", intra_node_gbps=150.0, inter_node_gbps=12.5),
    Partition(name="npu", accelerator="npu", intra_node_gbps=56.0, inter_node_gbps=25.0),
)


class FakeSlurm:
    """A runner double: recorded outputs in, scontrol writes applied to its job table."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.doc = json.loads(fixture_text(version, "squeue.json"))
        self.nodes_text = fixture_text(version, "nodes.json")
        self.calls: list[tuple[str, ...]] = []
        self.counts: Counter[str] = Counter()
        #: argv prefix -> (returncode, stderr) to answer instead of succeeding.
        self.fail: dict[tuple[str, ...], tuple[int, str]] = {}
        self.down = False

    # -- the job table -----------------------------------------------------------------------
    def job(self, name: str) -> dict:
        return next(j for j in self.doc["jobs"] if j["name"] == name)

    def id(self, name: str) -> str:
        return str(self.job(name)["job_id"])

    def _set(self, job: dict, key: str, value) -> None:
        old = job.get(key)
        job[key] = {"set": True, "infinite": False, "number": value} if isinstance(old, dict) and key == "priority" else value

    def priority(self, name: str) -> int:
        value = self.job(name)["priority"]
        return value["number"] if isinstance(value, dict) else value

    def _by_id(self, job_id: str) -> dict | None:
        return next((j for j in self.doc["jobs"] if str(j["job_id"]) == job_id), None)

    # -- the runner interface -------------------------------------------------------------------
    def run(self, argv, *, timeout_s=None) -> RunResult:
        argv = tuple(argv)
        self.calls.append(argv)
        self.counts[command_key(argv)] += 1
        for prefix, (rc, err) in self.fail.items():
            if argv[: len(prefix)] == prefix:
                outcome = Outcome.UNREACHABLE if "contact" in err else Outcome.MALFORMED
                return RunResult(argv, outcome, rc, "", err, 0.01)
        if self.down:
            return RunResult(argv, Outcome.UNREACHABLE, 1, "", "Unable to contact slurm controller (connect failure)", 9.0)
        out = ""
        if argv == ("squeue", "--json", "--states=all"):
            out = json.dumps(self.doc)
        elif argv in (("sinfo", "--json"), ("scontrol", "show", "node", "--json")):
            out = self.nodes_text
        elif argv == ("scontrol", "--version"):
            out = fixture_text(self.version, "version.txt")
        elif argv[:2] == ("scontrol", "update"):
            ids = argv[2].split("=", 1)[1].split(",")
            for job_id in ids:
                job = self._by_id(job_id)
                if job is None:
                    return RunResult(argv, Outcome.MALFORMED, 1, "", f"Invalid job id specified for job {job_id}", 0.01)
                for field in argv[3:]:
                    key, _, value = field.partition("=")
                    if key == "Priority":
                        if self.priority(job["name"]) == 0:
                            return RunResult(argv, Outcome.MALFORMED, 1, "", "Job is in held state, pending scheduler release", 0.01)
                        self._set(job, "priority", int(value))
                    elif key == "ReqNodeList":
                        job["required_nodes"] = value
                    elif key == "AdminComment":
                        job["admin_comment"] = value
                    elif key == "StartTime" and job.get("state_reason") == "BeginTime":
                        job["state_reason"] = "Priority"
        elif argv[:2] == ("scontrol", "requeue"):
            for job_id in argv[2].split(","):
                job = self._by_id(job_id)
                if job is None or job.get("requeue") is not True:
                    return RunResult(argv, Outcome.MALFORMED, 1, "", f"Requested operation is presently disabled for job {job_id}", 0.01)
                job["job_state"] = "PENDING"
                job["nodes"] = ""
        elif argv[:2] in (("scontrol", "hold"), ("scontrol", "release")):
            for job_id in argv[2].split(","):
                job = self._by_id(job_id)
                if argv[1] == "hold":
                    self._set(job, "priority", 0)
                    job["state_reason"] = "JobHeldAdmin"
                else:
                    self._set(job, "priority", 4294901700)
                    job["state_reason"] = "Priority"
        else:
            raise AssertionError(f"unexpected command {argv}")
        return RunResult(argv, Outcome.OK, 0, out, "", 0.01)

    def writes(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[:2] in (("scontrol", "update"), ("scontrol", "hold"), ("scontrol", "release"))]


def backend(fake: FakeSlurm, **config) -> SlurmCliBackend:
    config.setdefault("partitions", PARTITIONS)
    return SlurmCliBackend(SlurmBackendConfig(**config), runner=fake)  # type: ignore[arg-type]


@pytest.fixture
def fake(version) -> FakeSlurm:
    return FakeSlurm(version)


# -- snapshot -------------------------------------------------------------------------------------


def test_snapshot_nodes_and_partitions(fake):
    snap = backend(fake).snapshot()
    assert [p.name for p in snap.partitions] == ["a100", "v100", "npu"]
    assert snap.partition("a100").intra_node_gbps == 300.0
    nodes = {n.name: (n.partition, n.accelerator, n.accelerators_total, n.accelerators_free) for n in snap.nodes}
    assert nodes == {
        "node1": ("a100", "a100", 8, 0),
        "node2": ("a100", "a100", 8, 5),
        "node3": ("v100", "v100", 4, 0),  # 2 of 4 used, but drained: nothing free
        "node4": ("npu", "npu", 8, 0),
    }
    # exactly one squeue and one node query per cycle (the version comes from squeue's meta)
    assert fake.counts["squeue"] == 1 and sum(fake.counts.values()) == 2


def test_snapshot_without_configured_partitions_derives_them(fake):
    snap = backend(fake, partitions=()).snapshot()
    assert [(p.name, p.accelerator) for p in snap.partitions] == [("a100", "a100"), ("v100", "v100"), ("npu", "npu")]
    assert {n.name: n.partition for n in snap.nodes}["node2"] == "a100"


def test_snapshot_pending_jobs(fake):
    snap = backend(fake).snapshot()
    pending = {j.job_id: j for j in snap.pending}
    by_name = {name: pending.get(fake.id(name)) for name in (
        "rec-pend-typed", "rec pend multi partition", "rec-pend-untyped", "rec-pend-gpus-per-job",
        "rec-pend-npu", "rec-pend-pinned-by-user", "rec-pend-held", "rec-pend-begin", "rec-pend-admin")}
    typed = by_name["rec-pend-typed"]
    assert typed.accelerators == 8 and typed.allowed_partitions == ("a100",) and typed.allowed_accelerators == ("a100",)
    # comment hint asrpt:tp=2,pp=2,class=bert -> dp derived
    assert (typed.parallel.data, typed.parallel.pipeline, typed.parallel.tensor) == (2, 2, 2)
    assert typed.workload_class == "bert" and typed.time_limit_s == 1564 * 60.0
    assert typed.user == "root" and typed.group == "root/rec-pend-typed"
    assert typed.submit_time_s == fake.job("rec-pend-typed")["submit_time"] if fake.version == "22.05" else True
    multi = by_name["rec pend multi partition"]
    # 6 GPUs on one node: the 4-GPU v100 node cannot take it
    assert multi.accelerators == 6 and multi.allowed_partitions == ("a100",)
    assert by_name["rec-pend-untyped"].allowed_partitions == ("a100",)  # gpu:8 per node
    spread = by_name["rec-pend-gpus-per-job"]  # --gpus=12 in the default gpu partition
    assert spread.accelerators == 12 and spread.allowed_partitions == ("a100", "v100")
    assert spread.allowed_accelerators == ("a100", "v100") and spread.workload_class == "resnet50"
    assert by_name["rec-pend-npu"].allowed_partitions == ("npu",) and by_name["rec-pend-npu"].accelerators == 4
    assert by_name["rec-pend-pinned-by-user"] is not None  # waits for resources: schedulable
    assert by_name["rec-pend-admin"].accelerators == 6
    assert by_name["rec-pend-held"] is None and by_name["rec-pend-begin"] is None
    assert [j.submit_time_s for j in snap.pending] == sorted(j.submit_time_s for j in snap.pending)


def test_snapshot_request_shapes(fake):
    """Per-node GRES x nodes is a fixed shape (cons_tres gives exactly that or nothing);
    ``--gpus`` alone is spread; ``--gpus`` with ``--gpus-per-node`` is fixed g/k x k."""
    gres = "gres/gpu" if fake.version == "24.11" else "gres:gpu"
    both = fake.job("rec-pend-untyped")
    both["tres_per_job"], both["tres_per_node"] = f"{gres}:8", f"{gres}:4"  # --gpus=8 --gpus-per-node=4
    snap = backend(fake).snapshot()
    pending = {j.job_id: j for j in snap.pending}
    assert pending[fake.id("rec-pend-typed")].request_shape == RequestShape(nodes=1, per_node=8)
    assert pending[fake.id("rec pend multi partition")].request_shape == RequestShape(nodes=1, per_node=6)
    assert pending[fake.id("rec-pend-gpus-per-job")].request_shape == SPREAD  # --gpus=12
    untyped = pending[fake.id("rec-pend-untyped")]
    assert untyped.accelerators == 8 and untyped.request_shape == RequestShape(nodes=2, per_node=4)
    # a running job keeps its placement; its request (-N 2 --gres=gpu:a100:3) is 2 x 3
    running = {r.job.job_id: r for r in snap.running}
    assert running[fake.id("rec-two-nodes")].job.request_shape == RequestShape(nodes=2, per_node=3)
    assert running[fake.id("rec-v100-gpus")].job.request_shape == SPREAD


def test_snapshot_running_jobs(fake):
    seen = []

    def alpha(job, worker_nodes, partition):
        seen.append((job.job_id, worker_nodes, partition.name))
        return 0.25 * len(set(worker_nodes))

    b = SlurmCliBackend(SlurmBackendConfig(partitions=PARTITIONS), runner=fake, iteration_time_s=alpha)  # type: ignore[arg-type]
    snap = b.snapshot()
    running = {r.job.job_id: r for r in snap.running}
    assert set(running) == {fake.id(n) for n in ("rec-two-nodes", "rec-fill-node1", "rec-v100-gpus", "rec-npu-run")}
    two = running[fake.id("rec-two-nodes")]
    assert two.placement.worker_nodes == ("node1",) * 3 + ("node2",) * 3
    assert two.placement.partition == "a100" and two.placement.iteration_time_s == 0.5
    assert two.job.accelerators == 6 and two.start_time_s > 1.7e9
    assert running[fake.id("rec-v100-gpus")].placement.worker_nodes == ("node3", "node3")
    assert running[fake.id("rec-npu-run")].placement.node_counts == {"node4": 8}
    assert (fake.id("rec-two-nodes"), two.placement.worker_nodes, "a100") in seen


def test_snapshot_version_from_scontrol_when_meta_lacks_it(fake):
    del fake.doc["meta"]
    b = backend(fake)
    b.snapshot()
    assert b.slurm_version == {"22.05": (22, 5, 8), "24.11": (24, 11, 5)}[fake.version]
    assert fake.counts["scontrol"] == 1
    b.snapshot()
    assert fake.counts["scontrol"] == 1  # asked once


def test_node_query_follows_the_version(fake):
    backend(fake).snapshot()
    expected = ("sinfo", "--json") if fake.version == "22.05" else ("scontrol", "show", "node", "--json")
    assert fake.calls[1] == expected


def test_unreachable_poll_raises_and_keeps_the_previous_view(fake):
    b = backend(fake)
    b.snapshot()
    before = b.jobs
    fake.down = True
    with pytest.raises(SlurmUnreachable):
        b.snapshot()
    assert b.jobs == before


def test_2205_error_answer_with_exit_0_is_unreachable():
    fake = FakeSlurm("22.05")
    b = backend(fake)
    b.snapshot()
    fake.doc = json.loads(fixture_text("22.05", "unreachable/squeue_json.stdout"))
    with pytest.raises(SlurmUnreachable, match="Failed while looking for jobs"):
        b.snapshot()
    assert len(b.jobs) == 20  # not an empty queue


def test_node_query_failure_after_squeue_gives_no_half_snapshot(fake):
    b = backend(fake)
    node_cmd = ("sinfo",) if fake.version == "22.05" else ("scontrol", "show", "node")
    fake.fail[node_cmd] = (1, "slurm_load_node error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnreachable):
        b.snapshot()
    assert b.jobs == {}
    fake.fail.clear()
    fake.nodes_text = fake.nodes_text[: len(fake.nodes_text) // 2]
    with pytest.raises(SlurmOutputMalformed):
        b.snapshot()
    assert b.jobs == {}


# -- apply: priorities ------------------------------------------------------------------------------


def pending_ids(snap) -> list[str]:
    return [j.job_id for j in snap.pending]


def test_apply_sets_priorities_above_slurms_range_in_order(fake):
    b = backend(fake)
    snap = b.snapshot()
    order = tuple(reversed(pending_ids(snap)))
    report = apply(b, Decision(order=order))
    values = [fake.priority(next(j["name"] for j in fake.doc["jobs"] if str(j["job_id"]) == jid)) for jid in order]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert all(PRIORITY_AUTO_MAX < v <= PRIORITY_MAX for v in values)
    # rec-pend-admin already had 4294967000 (in the band, top): it keeps it if the order allows
    assert report.priorities <= len(order) and report.failures == []


def test_apply_writes_only_what_changed(fake):
    b = backend(fake)
    order = tuple(pending_ids(b.snapshot()))
    apply(b, Decision(order=order))
    first = len(fake.writes())
    assert apply(b, Decision(order=order)).calls == 0  # same decision, no new poll
    b.snapshot()
    assert apply(b, Decision(order=order)).calls == 0  # same decision, fresh poll
    # one job moves to the front: one write, not a renumbering
    moved = (order[-1],) + order[:-1]
    b.snapshot()
    report = apply(b, Decision(order=moved))
    assert report.calls == 1 and report.priorities == 1
    assert len(fake.writes()) == first + 1


def test_priorities_beyond_the_ordered_limit_share_the_floor_in_one_call(fake):
    b = backend(fake, ordered_limit=2)
    order = tuple(pending_ids(b.snapshot()))
    apply(b, Decision(order=order))
    floor = b.config.priority_floor
    batched = [c for c in fake.writes() if c[-1] == f"Priority={floor}" and "," in c[2]]
    assert len(batched) == 1
    # rec-pend-admin changes its comment too (its old pin is cleared): that one goes alone
    assert set(batched[0][2].removeprefix("JobId=").split(",")) == set(order[2:]) - {fake.id("rec-pend-admin")}
    tail_names = [j["name"] for j in fake.doc["jobs"] if str(j["job_id"]) in order[2:]]
    assert {fake.priority(n) for n in tail_names} == {floor}


# -- apply: node lists ------------------------------------------------------------------------------


def start(job_id: str, *nodes: str, partition: str = "a100") -> Placement:
    return Placement(job_id=job_id, partition=partition, worker_nodes=nodes, iteration_time_s=1.0)


def test_pin_decided_start_and_clear_it_later(fake):
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-typed")
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *["node2"] * 8),)))
    assert report.pins == 1
    job = fake.job("rec-pend-typed")
    assert job["required_nodes"] == "node2"
    assert split_admin_comment(job["admin_comment"])[1] == {"pin"}
    # the pin and its flag travel in one call (a crash cannot separate them)
    (call,) = [c for c in fake.writes() if "ReqNodeList=node2" in c]
    assert any(a.startswith("AdminComment=asrpt[pin]") for a in call)
    b.snapshot()
    report = apply(b, Decision(order=(jid,)))
    assert report.pins_cleared == 1 and job["required_nodes"] == "" and job["admin_comment"] == ""


def test_starts_get_the_highest_priorities(fake):
    """Slurm starts the decision's starts at once only if nothing outranks them: a start that
    a backfilling policy found behind a blocked job must not wait behind it on Slurm (the
    simulator's Slurm model, sim/slurmctld.py, assumes the same order)."""
    b = backend(fake)
    snap = b.snapshot()
    jid = fake.id("rec-pend-typed")
    order = tuple(j for j in pending_ids(snap) if j != jid) + (jid,)
    apply(b, Decision(order=order, starts=(start(jid, *["node2"] * 8),)))
    by_id = {str(j["job_id"]): j["name"] for j in fake.doc["jobs"]}
    values = {j: fake.priority(by_id[j]) for j in order}
    assert values[jid] > max(v for j, v in values.items() if j != jid)
    rest = [values[j] for j in order if j != jid]
    assert rest == sorted(rest, reverse=True)  # the others keep the decision's order


@pytest.mark.parametrize(
    ("name", "nodes", "why"),
    [
        ("rec-pend-typed", ["node3"] * 8, "not all in one of its partitions"),  # the a100 partition
        ("rec-pend-npu", ["node1"] * 4, "not all in one of its partitions"),  # npu job on a GPU node
        ("rec-pend-typed", ["node1"] * 4 + ["node2"] * 4, "2 nodes for a job of 1 node"),
        ("rec-pend-untyped", ["node3"] * 8, "has 4 gpu, the job needs 8"),
        ("rec-pend-typed", ["node9"] * 8, "not all in one of its partitions"),
    ],
)
def test_impossible_pins_are_never_written(fake, name, nodes, why):
    b = backend(fake)
    b.snapshot()
    jid = fake.id(name)
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *nodes),)))
    assert why in report.pins_skipped[jid]
    assert not [c for c in fake.writes() if c[2] == f"JobId={jid}" and any(a.startswith("ReqNodeList=") for a in c)]
    assert fake.job(name)["required_nodes"] == ""


def test_pin_to_a_node_without_the_gres_type_is_never_written(fake):
    """An a100 job of the umbrella gpu partition may not be pinned to the v100 node (Slurm
    would accept it and then hold the job with BadConstraints)."""
    job = fake.job("rec-pend-untyped")
    job["tres_per_node"] = job["tres_per_node"].replace("gpu:8", "gpu:a100:4")
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-untyped")
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *["node3"] * 4, partition="v100"),)))
    assert "node node3 has no gpu:a100" in report.pins_skipped[jid]
    assert job["required_nodes"] == ""
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *["node2"] * 4),)))
    assert report.pins == 1 and job["required_nodes"] == "node2"


def test_spread_job_may_be_pinned_to_several_nodes(fake):
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-gpus-per-job")  # --gpus=12
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *(["node1"] * 8 + ["node2"] * 4)),)))
    assert report.pins == 1 and fake.job("rec-pend-gpus-per-job")["required_nodes"] == "node[1-2]"


def test_users_own_node_list_is_never_touched(fake):
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-pinned-by-user")
    report = apply(b, Decision(order=(jid,), starts=(start(jid, *["node1"] * 8),)))
    assert "own node list" in report.pins_skipped[jid]
    assert fake.job("rec-pend-pinned-by-user")["required_nodes"] == "node2"
    b.snapshot()
    apply(b, Decision(order=(jid,)))  # not a start any more: still not cleared
    assert fake.job("rec-pend-pinned-by-user")["required_nodes"] == "node2"


def test_a_pin_of_a_previous_daemon_is_recognised_from_the_comment(fake):
    """rec-pend-admin carries "tag=abc asrpt[pin]: eta 12:00" and ReqNodeList=node2."""
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-admin")
    apply(b, Decision(order=(jid,)))
    job = fake.job("rec-pend-admin")
    assert job["required_nodes"] == ""
    assert job["admin_comment"] == "tag=abc asrpt: eta 12:00"  # other text kept, flag gone


def test_bad_constraints_pin_is_repaired(fake):
    job = fake.job("rec-pend-admin")  # pinned by asrpt; pretend Slurm found it impossible
    job["state_reason"] = "BadConstraints"
    job["priority"] = {"set": True, "infinite": False, "number": 0} if fake.version == "24.11" else 0
    b = backend(fake)
    snap = b.snapshot()
    jid = fake.id("rec-pend-admin")
    assert jid in pending_ids(snap)  # asrpt's own problem stays visible
    report = apply(b, Decision(order=(jid,)))
    kinds = [c[1] + (" " + c[3].split("=")[0] if c[1] == "update" else "") for c in fake.writes()]
    assert kinds[:3] == ["update ReqNodeList", "release", "update Priority"]
    assert report.releases == 1 and job["required_nodes"] == "" and fake.priority("rec-pend-admin") > PRIORITY_AUTO_MAX


# -- apply: holds -----------------------------------------------------------------------------------


def test_hold_then_release(fake):
    b = backend(fake)
    b.snapshot()
    a, c = fake.id("rec-pend-typed"), fake.id("rec-pend-npu")
    report = apply(b, Decision(order=(c,), holds=(a,)))
    assert report.holds == 1
    held = fake.job("rec-pend-typed")
    assert fake.priority("rec-pend-typed") == 0 and "held" in split_admin_comment(held["admin_comment"])[1]
    comment_call = next(i for i, c2 in enumerate(fake.calls) if c2[:3] == ("scontrol", "update", f"JobId={a}"))
    hold_call = next(i for i, c2 in enumerate(fake.calls) if c2[:2] == ("scontrol", "hold"))
    assert comment_call < hold_call  # the flag is written before the hold
    snap = b.snapshot()
    assert a in pending_ids(snap)  # asrpt's hold stays visible to the policy
    assert apply(b, Decision(order=(c,), holds=(a,))).calls == 0
    report = apply(b, Decision(order=(a, c)))
    assert report.releases == 1
    assert fake.priority("rec-pend-typed") > fake.priority("rec-pend-npu") > PRIORITY_AUTO_MAX
    assert held["admin_comment"] == ""


def test_restarted_daemon_releases_its_hold(fake):
    b = backend(fake)
    b.snapshot()
    a = fake.id("rec-pend-typed")
    apply(b, Decision(order=(), holds=(a,)))
    fresh = backend(fake)  # a new process: nothing in memory
    snap = fresh.snapshot()
    assert a in pending_ids(snap)
    assert apply(fresh, Decision(order=(a,))).releases == 1
    assert fake.priority("rec-pend-typed") > PRIORITY_AUTO_MAX


def test_users_hold_is_never_released(fake):
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-held")
    report = apply(b, Decision(order=(jid,)))
    assert report.releases == 0 and fake.priority("rec-pend-held") == 0
    assert not [c for c in fake.writes() if c[1] == "release"]


def test_failed_flag_write_means_no_hold(fake):
    b = backend(fake)
    b.snapshot()
    a = fake.id("rec-pend-typed")
    fake.fail[("scontrol", "update", f"JobId={a}")] = (1, "Access/permission denied")
    report = apply(b, Decision(order=(), holds=(a,)))
    assert report.holds == 0 and report.failures
    assert not [c for c in fake.calls if c[1:2] == ("hold",)]


# -- apply: comments and failures --------------------------------------------------------------------


def test_admin_comments_keep_other_text_and_change_only_when_different(fake):
    texts = {}
    b = SlurmCliBackend(SlurmBackendConfig(partitions=PARTITIONS), runner=fake,  # type: ignore[arg-type]
                        admin_comment=lambda job_id, decision: texts.get(job_id))
    b.snapshot()
    typed, admin = fake.id("rec-pend-typed"), fake.id("rec-pend-admin")
    texts.update({typed: "ETA start 12:00, end 14:00", admin: "ETA start 13:00"})
    apply(b, Decision(order=(typed, admin)))
    assert fake.job("rec-pend-typed")["admin_comment"] == "asrpt: ETA start 12:00, end 14:00"
    assert fake.job("rec-pend-admin")["admin_comment"] == "tag=abc asrpt: ETA start 13:00"
    b.snapshot()
    assert apply(b, Decision(order=(typed, admin))).calls == 0
    report = apply(b, Decision(order=(typed, admin)), admin_comments={typed: "ETA start 12:05, end 14:05"})
    assert report.admin_comments == 2  # typed changed; admin's text dropped (not given)
    assert fake.job("rec-pend-admin")["admin_comment"] == "tag=abc"


def test_rejected_write_is_reported_and_the_rest_goes_on(fake):
    b = backend(fake)
    order = tuple(pending_ids(b.snapshot()))
    fake.fail[("scontrol", "update", f"JobId={order[0]}")] = (1, f"Invalid job id specified for job {order[0]}")
    report = apply(b, Decision(order=order))
    assert len(report.failures) == 1 and "Invalid job id" in report.failures[0]
    assert report.priorities >= len(order) - 2


def test_unreachable_midway_raises_after_keeping_what_was_written(fake):
    b = backend(fake)
    order = tuple(pending_ids(b.snapshot()))
    fake.fail[("scontrol", "update", f"JobId={order[2]}")] = (1, "Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnreachable):
        apply(b, Decision(order=order))
    assert len(fake.writes()) == 3
    fake.fail.clear()
    b.snapshot()
    report = apply(b, Decision(order=order))
    assert report.calls >= 1 and report.failures == []


def test_batch_rejection_names_the_failing_job(fake):
    b = backend(fake, ordered_limit=1)
    order = tuple(pending_ids(b.snapshot()))
    gone = order[-1]
    fake.doc["jobs"] = [j for j in fake.doc["jobs"] if str(j["job_id"]) != gone]  # ended meanwhile
    report = apply(b, Decision(order=order))
    batch = [c for c in fake.writes() if "," in c[2]]
    assert len(batch) == 1 and len(report.failures) == 1
    assert not [c for c in fake.writes() if c[2] in {f"JobId={j}" for j in order[1:]} and len(c) == 4]
    assert report.priorities == len(order) - 1


def test_decisions_about_unknown_or_running_jobs_are_ignored(fake):
    fake.job("rec-pend-admin").update(admin_comment="", required_nodes="")  # nothing of asrpt's left
    b = backend(fake)
    b.snapshot()
    running = fake.id("rec-two-nodes")
    report = apply(b, Decision(order=("999999", running), holds=("888888", running),
                              starts=(start("777777", "node1"),)))
    assert report.calls == 0


def test_preempts_requeue_only_running_jobs_slurm_may_requeue(fake):
    """asrpt-preempt's victims: `scontrol requeue` in one call, only for running jobs whose
    requeue flag is set (the policy sees the flag as Job.requeueable); a pending id or a
    --no-requeue job in the decision is left alone."""
    ids = [r.job.job_id for r in backend(fake).snapshot().running]
    assert len(ids) >= 2
    yes, no = ids[0], ids[1]
    assert fake._by_id(yes)["requeue"] is True
    fake._by_id(no)["requeue"] = False
    b = backend(fake)
    snap = b.snapshot()
    flags = {r.job.job_id: r.job.requeueable for r in snap.running}
    assert flags[yes] is True and flags[no] is False
    pending = fake.id("rec-pend-typed")
    report = apply(b, Decision(order=(pending,), preempts=(yes, no, pending)))
    assert report.requeues == 1
    assert [c for c in fake.calls if c[:2] == ("scontrol", "requeue")] == [("scontrol", "requeue", yes)]


def test_apply_without_snapshot_polls_first(fake):
    b = backend(fake)
    apply(b, Decision(order=()))
    assert fake.counts["squeue"] == 1


# -- finished jobs -----------------------------------------------------------------------------------


def test_finished_jobs_from_the_completion_log(tmp_path):
    log = tmp_path / "jobcomp.log"
    lines = fixture_text("22.05", "jobcomp.log").splitlines(keepends=True)
    log.write_text("".join(lines[:3]) + lines[3][:40])  # the 4th line is still being written
    b = SlurmCliBackend(SlurmBackendConfig(jobcomp_log=str(log)), runner=FakeSlurm("22.05"))  # type: ignore[arg-type]
    found = b.finished_jobs(0.0)
    assert len(found) == 3 and all(r.source == "jobcomp" for r in found)
    assert [r.end_time_s for r in found] == sorted(r.end_time_s for r in found)
    with log.open("a") as handle:
        handle.write(lines[3][40:] + "".join(lines[4:]) + "garbage line\n")
    found = b.finished_jobs(0.0)
    assert {r.name for r in found} == {
        "rec-killed", "rec-failed", "rec cancelled running", "rec-cancelled-pending", "rec-completed",
        "rec-pend-held", "rec-timeout",
    }
    latest = max(r.end_time_s for r in found)
    assert [r.name for r in b.finished_jobs(latest)] == ["rec-timeout"]
    assert len(b.finished_jobs(0.0)) == 7  # an earlier since re-reads the log


def test_finished_jobs_ignore_a_record_forged_through_a_job_name(tmp_path, caplog):
    """Issue 16: a newline in bob's job name made his record's second line read as alice's job."""
    def line(job_id: int, user: str, uid: int, name: str, end: str) -> str:
        return (f"JobId={job_id} UserId={user}({uid}) GroupId={user}({uid}) Name={name} JobState=COMPLETED "
                f"Partition=gpu TimeLimit=60 StartTime=2026-12-02T10:00:00 EndTime={end} NodeList=node1 NodeCnt=1 "
                f"ProcCnt=1 WorkDir=/home ReservationName= Tres=cpu=1 Account=ml QOS=normal WcKey= Cluster=c "
                f"SubmitTime=2026-12-02T10:00:00 EligibleTime=2026-12-02T10:00:00 DerivedExitCode=0:0 ExitCode=0:0 \n")  # fmt: skip

    log = tmp_path / "jobcomp.log"
    alice = line(41, "alice", 1001, "train", "2026-12-02T10:00:04")
    forged = line(42, "bob", 1002, "x\nJobId=41 UserId=alice(1001) GroupId=alice(1001) Name=train", "2026-12-02T10:00:45")
    log.write_text(alice)
    b = SlurmCliBackend(SlurmBackendConfig(jobcomp_log=str(log)), runner=FakeSlurm("22.05"))  # type: ignore[arg-type]
    assert [(r.job_id, r.runtime_s) for r in b.finished_jobs(0.0)] == [("41", 4.0)]
    with log.open("a") as handle:
        handle.write(forged)
    with caplog.at_level("WARNING"):
        found = b.finished_jobs(0.0)
    assert [(r.job_id, r.user, r.runtime_s) for r in found] == [("41", "alice", 4.0)]
    assert f"byte {len(alice)}" in caplog.text and "JobId=42 UserId=bob" in caplog.text
    # a record still being written (its name holds a newline) waits, then counts once complete
    odd = line(43, "bob", 1002, "a\nb", "2026-12-02T10:00:09")
    with log.open("a") as handle:
        handle.write(odd[: odd.index("\n") + 5])
    assert [r.job_id for r in b.finished_jobs(0.0)] == ["41"]
    with log.open("a") as handle:
        handle.write(odd[odd.index("\n") + 5 :])
    assert sorted(r.job_id for r in b.finished_jobs(0.0)) == ["41", "43"]


def test_finished_jobs_log_missing_or_rotated(tmp_path):
    log = tmp_path / "jobcomp.log"
    b = SlurmCliBackend(SlurmBackendConfig(jobcomp_log=str(log)), runner=FakeSlurm("22.05"))  # type: ignore[arg-type]
    assert b.finished_jobs(0.0) == ()
    text = fixture_text("22.05", "jobcomp.log")
    log.write_text(text)
    assert len(b.finished_jobs(0.0)) == 7
    os.replace(log, tmp_path / "jobcomp.log.1")
    log.write_text(text.splitlines(keepends=True)[0])
    assert len(b.finished_jobs(0.0)) == 1


def test_finished_jobs_with_sacct(tmp_path):
    fake = FakeSlurm("22.05")
    sacct = fixture_text("22.05", "sacct.txt")
    runs = []

    class WithSacct:
        counts = fake.counts

        def run(self, argv, *, timeout_s=None):
            runs.append(tuple(argv))
            if argv[0] == "sacct":
                return RunResult(tuple(argv), Outcome.OK, 0, sacct, "", 0.01)
            return fake.run(argv)

    b = SlurmCliBackend(SlurmBackendConfig(use_sacct=True), runner=WithSacct())  # type: ignore[arg-type]
    names = {r.name for r in b.finished_jobs(time.time() - 10 * 365 * 86400)}
    assert "rec-failed" in names and "rec-two-nodes" not in names
    assert runs[0][0] == "sacct"


# -- pure helpers ------------------------------------------------------------------------------------


def test_config_validation():
    with pytest.raises(ConfigError, match="above priority/basic"):
        SlurmBackendConfig(priority_floor=1000)
    with pytest.raises(ConfigError, match="priority_ceiling"):
        SlurmBackendConfig(priority_ceiling=PRIORITY_MAX + 1)
    with pytest.raises(ConfigError, match="ordered_limit"):
        SlurmBackendConfig(ordered_limit=10**6)
    with pytest.raises(ConfigError, match="duplicate"):
        SlurmBackendConfig(partitions=(PARTITIONS[0], PARTITIONS[0]))


def test_hints():
    assert parse_hints("").parallel_for(4).data == 4
    hints = parse_hints("please asrpt:dp=2,pp=2,tp=2,mb=8,class=gpt-2 thanks")
    config = hints.parallel_for(8)
    assert (config.data, config.pipeline, config.tensor, config.micro_batches) == (2, 2, 2, 8)
    assert hints.workload_class == "gpt-2"
    assert parse_hints("asrpt:tp=3").parallel_for(8).data == 8  # does not divide: data parallel
    assert parse_hints("asrpt:dp=3,tp=2").parallel_for(8).workers == 8  # wrong product: data parallel
    assert parse_hints("asrpt:tp=x,class=;rm").workload_class is None


def test_admin_comment_format():
    assert split_admin_comment("") == ("", frozenset(), None)
    assert split_admin_comment("tag=abc") == ("tag=abc", frozenset(), None)
    assert split_admin_comment("tag=abc asrpt[held,pin]: eta 12:00") == ("tag=abc", frozenset({"held", "pin"}), "eta 12:00")
    assert split_admin_comment("asrpt:") == ("", frozenset(), "")
    assert format_admin_comment("tag=abc", {"pin", "held"}, "eta") == "tag=abc asrpt[held,pin]: eta"
    assert format_admin_comment("tag=abc", (), None) == "tag=abc"
    long = format_admin_comment("x" * 500, {"held"}, "y" * 500, max_chars=100)
    assert len(long) <= 100 and "asrpt[held]:" in long  # the flag is never cut off
    assert split_admin_comment(long)[1] == {"held"}


def test_assign_priorities_fresh_and_incremental():
    kw = dict(floor=1000, ceiling=2000, gap=10, ordered_limit=100)
    first = assign_priorities(["a", "b", "c"], {}, **kw)
    assert first["a"] > first["b"] > first["c"] and first["a"] - first["b"] == 10
    # a new job in the middle costs one value; the others keep theirs
    second = assign_priorities(["a", "x", "b", "c"], first, **kw)
    assert {k: v for k, v in second.items() if first.get(k) != v} == {"x": second["x"]}
    assert second["a"] > second["x"] > second["b"]
    # new jobs on top and at the bottom get gap-spaced values
    third = assign_priorities(["top", "a", "b", "c", "bottom"], first, **kw)
    assert third["top"] == first["a"] + 10 and third["bottom"] == first["c"] - 10
    # no room between neighbours: renumber everything
    tight = assign_priorities(["a", "x", "b"], {"a": 1501, "b": 1500}, **kw)
    assert tight["a"] > tight["x"] > tight["b"]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=40),
    current=st.dictionaries(st.integers(0, 50).map(str), st.one_of(st.none(), st.integers(900, 2100)), max_size=50),
    gap=st.integers(1, 50),
    limit=st.integers(1, 45),
    seed=st.randoms(use_true_random=False),
)
def test_assign_priorities_properties(n, current, gap, limit, seed):
    order = [str(i) for i in range(n)]
    seed.shuffle(order)
    result = assign_priorities(order, current, floor=1000, ceiling=2000, gap=gap, ordered_limit=limit)
    assert set(result) == set(order)
    head, tail = order[:limit], order[limit:]
    values = [result[j] for j in head]
    assert all(1000 < v <= 2000 for v in values)
    assert all(x > y for x, y in zip(values, values[1:]))
    assert all(result[j] == 1000 for j in tail)
    # a job whose value already fits the order keeps it (a single job always fits)
    if len(head) == 1 and current.get(head[0]) is not None and 1000 < current[head[0]] <= 2000:
        assert result[head[0]] == current[head[0]]


def test_a_job_waiting_for_the_first_look_is_seen_and_made_eligible_in_one_write(fake):
    """job_submit.lua's begin time and "asrpt-look" tag: the job is in the snapshot although
    Slurm shows Reason=BeginTime; one update writes its priority, drops the tag (keeping the
    record token) and sets StartTime=now. A user's own --begin job is left alone."""
    looking = fake.job("rec-pend-gpus-per-job")
    looking["state_reason"], looking["admin_comment"] = "BeginTime", "asrpt-look asrpt-rec:0123456789abcdef0123"
    b = backend(fake)
    jid, begin = fake.id("rec-pend-gpus-per-job"), fake.id("rec-pend-begin")
    assert jid in pending_ids(b.snapshot()) and begin not in pending_ids(b.snapshot())
    report = apply(b, Decision(order=(jid,)))
    [call] = [c for c in fake.writes() if c[2] == f"JobId={jid}"]
    assert "StartTime=now" in call and any(f.startswith("Priority=") for f in call)
    assert report.first_looks == 1
    assert looking["admin_comment"] == "asrpt-rec:0123456789abcdef0123" and looking["state_reason"] == "Priority"
    assert not [c for c in fake.writes() if c[2] == f"JobId={begin}"]
    b.snapshot()
    assert apply(b, Decision(order=(jid,))).first_looks == 0  # once only


def test_a_first_look_job_the_decision_holds_is_held_before_it_is_made_eligible(fake):
    looking = fake.job("rec-pend-gpus-per-job")
    looking["state_reason"], looking["admin_comment"] = "BeginTime", "asrpt-look"
    b = backend(fake)
    b.snapshot()
    jid = fake.id("rec-pend-gpus-per-job")
    report = apply(b, Decision(order=(), holds=(jid,)))
    assert report.holds == 1 and report.first_looks == 1
    hold = next(i for i, c in enumerate(fake.calls) if c[:2] == ("scontrol", "hold"))
    start = next(i for i, c in enumerate(fake.calls) if "StartTime=now" in c)
    assert hold < start
