"""Small builders shared by tests (plain functions, no fixtures magic)."""

from __future__ import annotations

from asrpt.core.model import Job, Node, ParallelConfig, Partition
from asrpt.core.speed import SpeedTable, WorkloadProfile


def flat_speed_table(step_time_s: float = 1.0, accelerators: tuple[str, ...] = ("gpu",)) -> SpeedTable:
    """One workload class that does not communicate: alpha == step time on every placement."""
    return SpeedTable(
        workload_classes=["flat"],
        accelerators=list(accelerators),
        step_time_s=[[step_time_s] * len(accelerators)],
        profiles={"flat": WorkloadProfile(name="flat", params_gb=0.0, activation_gb_per_microbatch=0.0, tp_allreduce_gb_per_microbatch=0.0)},
    )


def partition_nodes(partition: str, accelerator: str, count: int, per_node: int) -> tuple[Partition, tuple[Node, ...]]:
    return (
        Partition(name=partition, accelerator=accelerator),
        tuple(
            Node(name=f"{partition}-{i:03d}", partition=partition, accelerator=accelerator, accelerators_total=per_node, accelerators_free=per_node)
            for i in range(count)
        ),
    )


def flat_job(job_id: str, accelerators: int, iterations: float, submit_s: float = 0.0, **extra) -> Job:
    return Job(
        job_id=job_id,
        submit_time_s=submit_s,
        parallel=ParallelConfig.data_parallel(accelerators),
        workload_class="flat",
        true_iterations=iterations,
        predicted_iterations=iterations,
        **extra,
    )


class WrappedPolicy:
    """A policy that hands everything to ``inner``; tests override ``decide`` to watch it."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name
        self.speed = inner.speed  # places the jobs the simulated Slurm starts on its own

    def new_state(self):
        return self.inner.new_state()

    def restore_state(self, data):
        return self.inner.restore_state(data)

    def decide(self, snapshot, now_s, state):
        return self.inner.decide(snapshot, now_s, state)


def run_as_nobody(argv, *, cwd, env, timeout_s: float = 60.0):
    """Run ``argv`` as the unprivileged user nobody (no groups): a second user on this host.
    Needs root and util-linux's setpriv (callers skip otherwise)."""
    import pwd
    import subprocess

    nobody = pwd.getpwnam("nobody")
    return subprocess.run(
        ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", *argv],
        capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env,
    )


def can_run_as_nobody() -> bool:
    import os
    import shutil

    return os.geteuid() == 0 and shutil.which("setpriv") is not None
