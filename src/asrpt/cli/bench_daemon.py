"""``asrpt bench daemon``: whole daemon cycles at scale, Slurm replaced by recorded answers.

What ``asrpt bench cycle`` leaves out is most of a real cycle: parsing ``squeue --json``,
ingesting the wrapper's spool records, the history database, predictions, the ETA forecast,
planning and making the scontrol writes, storing forecasts. This benchmark runs the real
``Daemon`` on a real SQLite file and a real spool directory; only the Slurm commands are
answered from JSON built here (a Slurm 22.05 ``squeue``/``sinfo``), and every scontrol write is
recorded and answered "ok" instead of run.

It reports the first cycle (every job new), then, once the jobs that cycle pinned have
started and the queue has settled, a steady cycle (1% of the pending jobs are new and as many
running jobs ended) and an idle cycle (nothing changed in Slurm), with the scontrol calls
each made: a cycle should write in proportion to what changed, not to the queue.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asrpt.slurm.runner import Outcome, RunResult, SlurmRunner, command_key

__all__ = ["DaemonBenchResult", "RecordedSlurm", "run_daemon_bench"]

#: Node types of the synthetic cluster: (Slurm partition, GRES type), 8 accelerators a node.
_NODE_TYPES = (("a100", "a100"), ("v100", "v100"), ("t4", "t4"))
_PER_NODE = 8
_CYCLE_INTERVAL_S = 30.0
#: Most cycles run after the first one for Slurm to start the jobs it pinned.
_SETTLE_CYCLES = 5
_WRITING = frozenset({"update", "hold", "release", "requeue"})


@dataclass(slots=True)
class SyntheticQueue:
    """The jobs Slurm would list, as squeue JSON records, and the nodes they occupy."""

    nodes: list[dict[str, Any]]
    jobs: dict[int, dict[str, Any]]
    used_per_node: dict[str, int]
    next_job_id: int
    rng: random.Random
    user_name: str

    def squeue_json(self) -> str:
        meta = {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"}}
        return json.dumps({"meta": meta, "errors": [], "jobs": list(self.jobs.values())})

    def nodes_json(self) -> str:
        for node in self.nodes:
            used = self.used_per_node.get(node["name"], 0)
            node["gres_used"] = f"gpu:{node['gres'].split(':')[1]}:{used}"
            node["state"] = "mixed" if used else "idle"
        return json.dumps({"meta": {}, "errors": [], "nodes": self.nodes})

    def pending_job(self, now_s: float) -> dict[str, Any]:
        job_id = self.next_job_id
        self.next_job_id += 1
        partition = self.rng.choice(_NODE_TYPES)[0]
        gpus = self.rng.choice((1, 1, 2, 4, 8, 16))
        return {
            "job_id": job_id, "job_state": "PENDING", "state_reason": "Priority",
            "user_name": self.user_name, "name": f"train-{self.rng.randrange(400)}",
            "partition": partition, "submit_time": int(now_s) - self.rng.randrange(1, 86400),
            "start_time": 0, "time_limit": self.rng.choice((60, 240, 720, 1440)),
            "priority": 1, "node_count": max(1, gpus // _PER_NODE), "tasks": 1, "nodes": "",
            "required_nodes": "", "tres_per_node": f"gres:gpu:{min(gpus, _PER_NODE)}",
            "tres_per_job": "", "tres_per_task": "", "gres_detail": [], "comment": "", "admin_comment": "",
        }

    def start_on_free_node(self, job: dict[str, Any], now_s: float) -> bool:
        """Make ``job`` (one node's worth or less) run on a node of its partition with room."""
        gpus = int(job["tres_per_node"].rsplit(":", 1)[1])
        for node in self.nodes:
            if job["partition"] in node["partitions"] and self.used_per_node.get(node["name"], 0) + gpus <= _PER_NODE:
                self.used_per_node[node["name"]] = self.used_per_node.get(node["name"], 0) + gpus
                gres_type = node["gres"].split(":")[1]
                job.update(job_state="RUNNING", state_reason="None", nodes=node["name"], node_count=1,
                           start_time=int(now_s) - self.rng.randrange(60, 3600),
                           gres_detail=[f"gpu:{gres_type}:{gpus}(IDX:0-{gpus - 1})"])
                return True
        return False

    def apply_write(self, subcommand: str, fields: Sequence[str]) -> None:
        """What slurmctld would show at the next poll after ``scontrol SUBCOMMAND FIELDS``."""
        if subcommand in ("hold", "release"):
            job_ids = [int(j) for arg in fields for j in arg.split(",") if j.isdigit()]
            for job_id in job_ids:
                if job_id in self.jobs:
                    held = subcommand == "hold"
                    self.jobs[job_id].update(priority=0 if held else 1, state_reason="JobHeldAdmin" if held else "Priority")
            return
        values = dict(item.split("=", 1) for item in fields if "=" in item)
        keys = {"Priority": "priority", "ReqNodeList": "required_nodes", "AdminComment": "admin_comment"}
        for job_id in values.pop("JobId", "").split(","):
            job = self.jobs.get(int(job_id)) if job_id.isdigit() else None
            if job is None:
                continue
            for key, value in values.items():
                if key in keys:
                    job[keys[key]] = int(value) if key == "Priority" else value

    def start_pinned(self, now_s: float) -> int:
        """Slurm's own pass, simplified: a pending job pinned to one node with room starts there."""
        started = 0
        for job in self.jobs.values():
            pinned = job["required_nodes"]
            if job["job_state"] != "PENDING" or not pinned or "[" in pinned or job["state_reason"] == "JobHeldAdmin":
                continue
            gpus = int(job["tres_per_node"].rsplit(":", 1)[1])
            if self.used_per_node.get(pinned, 0) + gpus > _PER_NODE:
                continue
            node = next(n for n in self.nodes if n["name"] == pinned)
            self.used_per_node[pinned] = self.used_per_node.get(pinned, 0) + gpus
            job.update(job_state="RUNNING", state_reason="None", nodes=pinned, start_time=int(now_s),
                       gres_detail=[f"gpu:{node['gres'].split(':')[1]}:{gpus}(IDX:0-{gpus - 1})"])
            started += 1
        return started

    def end_job(self, job_id: int) -> None:
        job = self.jobs.pop(job_id)
        gpus = int(job["tres_per_node"].rsplit(":", 1)[1])
        self.used_per_node[job["nodes"]] -= gpus


def synthetic_queue(pending: int, running: int, nodes: int, now_s: float, seed: int) -> SyntheticQueue:
    rng = random.Random(seed)
    node_records = []
    for i in range(nodes):
        partition, gres_type = _NODE_TYPES[i % len(_NODE_TYPES)]
        node_records.append({
            "name": f"gn{i:05d}", "state": "idle", "state_flags": [], "partitions": [partition],
            "gres": f"gpu:{gres_type}:{_PER_NODE}", "gres_used": f"gpu:{gres_type}:0", "reason": "",
        })
    queue = SyntheticQueue(node_records, {}, {}, 1000, rng, pwd.getpwuid(os.getuid()).pw_name)
    started = 0
    while started < running:
        job = queue.pending_job(now_s)
        job["tres_per_node"] = f"gres:gpu:{rng.choice((1, 2, 4, 8))}"
        if not queue.start_on_free_node(job, now_s):
            break
        queue.jobs[job["job_id"]] = job
        started += 1
    for _ in range(pending):
        job = queue.pending_job(now_s)
        queue.jobs[job["job_id"]] = job
    return queue


class RecordedSlurm(SlurmRunner):
    """Answers squeue/sinfo/version from a :class:`SyntheticQueue`; records every write."""

    def __init__(self, queue: SyntheticQueue) -> None:
        super().__init__()
        self.queue = queue
        self.calls: Counter[str] = Counter()
        self.writes: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout_s: float | None = None) -> RunResult:
        args = tuple(argv)
        self.calls[command_key(args)] += 1
        name = Path(args[0]).name if args else ""
        if name == "squeue":
            stdout = self.queue.squeue_json()
        elif name == "sinfo":
            stdout = self.queue.nodes_json()
        elif name == "scontrol" and args[1:2] == ("--version",):
            stdout = "slurm-wlm 22.05.8\n"
        elif name == "scontrol" and len(args) > 1 and args[1] in _WRITING:
            self.writes.append(args)
            self.queue.apply_write(args[1], args[2:])
            stdout = ""
        else:
            stdout = ""
        return RunResult(argv=args, outcome=Outcome.OK, returncode=0, stdout=stdout, stderr="", duration_s=0.0)


@dataclass(slots=True)
class DaemonBenchResult:
    pending: int
    running: int
    nodes: int
    policy: str
    first_cycle_s: float
    steady_cycle_s: float
    idle_cycle_s: float
    writes_first: int
    writes_steady: int
    writes_idle: int
    #: Jobs that changed in the steady cycle (new pending plus ended running).
    changed_steady: int
    writes_by_command: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _group_of(job_name: str) -> str:
    """The recurrence group (a sha256-shaped hex digest) of the synthetic jobs named so."""
    return f"{zlib.crc32(job_name.encode()):064x}"


def _seed_history(repository: Any, queue: SyntheticQueue, finished: int, now_s: float) -> None:
    """``finished`` past jobs of the same names, users and sizes, so the forest is trained."""
    from asrpt.db.repository import OutcomeRecord, SubmissionRecord

    rng = random.Random(queue.rng.random())
    live_next_job_id = queue.next_job_id
    for i in range(finished):
        template = queue.pending_job(now_s)
        submit_s = now_s - 30 * 86400 + i * 60.0
        run_s = rng.lognormvariate(7.5, 1.2)
        job_id = f"h{i}"
        repository.record_submission(SubmissionRecord(
            slurm_job_id=job_id, user=queue.user_name, submit_time_s=submit_s, source="slurm",
            job_name=template["name"], partitions=(template["partition"],),
            accelerators=int(template["tres_per_node"].rsplit(":", 1)[1]) * template["node_count"],
            recurrence_group=_group_of(template["name"]), time_limit_s=template["time_limit"] * 60.0,
        ), now_s=submit_s)
        repository.record_outcome(OutcomeRecord(
            slurm_job_id=job_id, start_time_s=submit_s + 10.0, end_time_s=submit_s + 10.0 + run_s,
            exit_state="COMPLETED", exit_code=0, iterations=run_s / 0.5,
        ), now_s=submit_s + run_s)
    queue.next_job_id = live_next_job_id  # the templates' ids were never used


def _write_spool_records(spool_dir: str, jobs: Sequence[dict[str, Any]]) -> None:
    """One wrapper record per job, as asrpt-sbatch writes them."""
    from asrpt.submit_wrapper import spool

    for job in jobs:
        record = spool.build_record(
            job_id=str(job["job_id"]), cluster=None, submit_time_s=float(job["submit_time"]),
            cwd="/home/bench", args=["--gres=gpu:1", "train.sh"],
            script={"sha256": f"{job['job_id'] % 400:064x}", "bytes": 100},
            recurrence_group=_group_of(job["name"]), directives={}, claimed_user=None,
            claimed_uid=os.getuid(), hostname="bench", wrapper_version="bench",
        )
        spool.write_record(spool_dir, spool.record_name(str(job["job_id"]), time.time_ns(), os.getpid(), "bench"),
                           spool.encode_record(record))


def run_daemon_bench(*, pending: int, running: int, nodes: int, policy: str = "asrpt", seed: int = 0,
                     history: int = 2000, workdir: str | None = None) -> DaemonBenchResult:
    """Three daemon cycles (first, steady, idle) on a synthetic queue; see the module doc."""
    from asrpt.daemon.config import DaemonConfig, DaemonSection, DatabaseSection, SpoolSection
    from asrpt.daemon.service import Daemon
    from asrpt.db.migrate import upgrade
    from asrpt.db.repository import HistoryRepository
    from asrpt.sim.engine import SimClock

    with tempfile.TemporaryDirectory(prefix="asrpt-bench-daemon-", dir=workdir) as tmp:
        url = f"sqlite:///{tmp}/history.db"
        spool_dir = os.path.join(tmp, "spool")
        os.makedirs(spool_dir, mode=0o700)
        upgrade(url)
        clock = SimClock(time.time())  # one cycle interval further at each cycle
        queue = synthetic_queue(pending, running, nodes, clock.t_s, seed)
        _write_spool_records(spool_dir, list(queue.jobs.values()))
        config = DaemonConfig(
            daemon=DaemonSection(policy=policy, state_dir=tmp),
            database=DatabaseSection(url=url),
            spool=SpoolSection(dir=spool_dir),
        )
        repository = HistoryRepository.from_url(url)
        try:
            _seed_history(repository, queue, history, clock.t_s)
            daemon = Daemon(config, repository=repository, clock=clock)
            recorder = RecordedSlurm(queue)
            daemon.backend.runner = recorder
            daemon.retrain()

            def timed_cycle() -> tuple[float, int, Counter[str]]:
                recorder.writes.clear()
                before = Counter(recorder.calls)
                started = time.perf_counter()
                if daemon.cycle() is None:
                    raise RuntimeError(f"the benchmark's daemon cycle failed: {daemon.stats.last_error}")
                elapsed = time.perf_counter() - started
                clock.t_s += _CYCLE_INTERVAL_S
                delta = Counter(recorder.calls)
                delta.subtract(before)
                return elapsed, len(recorder.writes), Counter({k: v for k, v in delta.items() if v})

            first_s, writes_first, calls_first = timed_cycle()
            # Slurm starts what the first cycle pinned; cycles until the queue settles.
            for _ in range(_SETTLE_CYCLES):
                if not queue.start_pinned(clock.t_s):
                    break
                timed_cycle()
            # Steady: 1% of the pending jobs are new, as many running jobs ended.
            changes = max(1, pending // 100)
            running_ids = [job_id for job_id, job in queue.jobs.items() if job["job_state"] == "RUNNING"]
            for job_id in queue.rng.sample(running_ids, min(changes, len(running_ids))):
                queue.end_job(job_id)
            new_jobs = [queue.pending_job(clock.t_s) for _ in range(changes)]
            for job in new_jobs:
                job["submit_time"] = int(clock.t_s) - 5
                queue.jobs[job["job_id"]] = job
            _write_spool_records(spool_dir, new_jobs)
            steady_s, writes_steady, calls_steady = timed_cycle()
            idle_s, writes_idle, calls_idle = timed_cycle()
        finally:
            repository.close()
    return DaemonBenchResult(
        pending=pending, running=running, nodes=nodes, policy=policy,
        first_cycle_s=first_s, steady_cycle_s=steady_s, idle_cycle_s=idle_s,
        writes_first=writes_first, writes_steady=writes_steady, writes_idle=writes_idle,
        changed_steady=changes + min(changes, len(running_ids)),
        writes_by_command={"first": dict(calls_first), "steady": dict(calls_steady), "idle": dict(calls_idle)},
    )
