"""``asrpt bench cycle`` and ``asrpt bench daemon``: the decide step alone, and whole daemon cycles.

``bench cycle`` builds a cluster of ``--nodes`` 8-accelerator nodes over three accelerator
types, keeps ``--running`` jobs on them and ``--pending`` jobs waiting, then measures (median
of ``--repeat`` runs): a whole first ``decide`` from a fresh policy state (``cycle_s``, the
worst case: every job is new), the iteration predictor on the pending jobs (``predict_s``), the
virtual SRPT alone (``srpt_s``) and Heavy-Edge placement of every pending job alone
(``placement_s``). ``bench daemon`` (:mod:`asrpt.cli.bench_daemon`) runs the real daemon
end to end and counts its Slurm writes. Performance is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from asrpt.cli.arg_types import int_at_least, output_file
from asrpt.cli.conventions import add_json_options, emit_json, table_stream
from asrpt.cli.simulate import POLICY_NAMES, REQUEUE_COST_DEFAULT, parse_requeue_cost
from asrpt.exceptions import AsrptError


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks of the hot paths")
    commands = bench.add_subparsers(dest="bench_command", metavar="COMMAND", required=True)
    cycle = commands.add_parser("cycle", help="time the decide step on a synthetic snapshot")
    cycle.add_argument("--pending", type=int_at_least(0), default=10000, help="pending jobs in the snapshot")
    cycle.add_argument("--running", type=int_at_least(0), default=1000, help="running jobs in the snapshot")
    cycle.add_argument("--nodes", type=int_at_least(1), default=1000, help="nodes in the snapshot")
    cycle.add_argument("--repeat", type=int_at_least(1), default=3, help="timed runs (the report gives each)")
    cycle.add_argument("--policy", choices=POLICY_NAMES, default="asrpt", help="the policy whose decide step is timed")
    cycle.add_argument("--seed", type=int, default=0, help="synthetic snapshot seed")
    cycle.add_argument("--json", action="store_true", help="print JSON only")
    cycle.set_defaults(func=run_bench_cycle)

    daemon = commands.add_parser(
        "daemon",
        help="time whole daemon cycles (real SQLite and spool, recorded Slurm answers) and count their writes",
        description="Run the real daemon's cycles on a synthetic Slurm 22.05 queue: the first cycle (every job new), "
        "then, once Slurm has started what that cycle pinned, a steady cycle (1%% of the pending jobs new, as many running "
        "jobs ended) and an idle cycle (nothing changed "
        "in Slurm). squeue/sinfo answers are built in memory; scontrol writes are recorded, not run.",
        epilog="example: asrpt bench daemon --pending 3000 --running 300 --nodes 300 --json",
    )
    daemon.add_argument("--pending", type=_positive_count, default=10000, help="pending jobs (default 10000)")
    daemon.add_argument("--running", type=_positive_count, default=1000, help="running jobs (default 1000; fewer if the nodes are full)")
    daemon.add_argument("--nodes", type=_positive_count, default=1000, help="8-GPU nodes, a100/v100/t4 in turn (default 1000)")
    daemon.add_argument("--policy", default="asrpt", help="the daemon's policy (default asrpt)")
    daemon.add_argument("--history", type=int, default=2000, help="finished jobs in the history the forest is trained on first (default 2000; 0: a cold start)")
    daemon.add_argument("--seed", type=int, default=0, help="synthetic queue seed (default 0)")
    daemon.add_argument("--json", action="store_true", help="print JSON only")
    daemon.set_defaults(func=run_bench_daemon)

    # Literal (not imported from asrpt.sim.matrix) so `asrpt --help` stays fast; a test checks them.
    matrix = commands.add_parser(
        "policies",
        help="the scenario matrix: every policy on several traces, 3 offered loads and several seeds",
        description="Replay each trace on its built-in cluster scaled to offered loads of about 0.5, 0.8 and 1.1 "
        "under every policy and several workload-mapping seeds; print one table (bench/README.md, 'Scenario matrix').",
    )
    matrix.add_argument("--traces", default=",".join(MATRIX_TRACE_NAMES), help=f"comma-separated (default {','.join(MATRIX_TRACE_NAMES)})")
    matrix.add_argument("--traces-dir", type=Path, default=None, help="folder of the shared traces (default ../shared/traces next to the repository)")
    matrix.add_argument("--seeds", default="0,1,2", help="comma-separated workload-mapping seeds (default 0,1,2)")
    matrix.add_argument("--policies", default=",".join(MATRIX_POLICY_NAMES), help=f"comma-separated (default all: {','.join(MATRIX_POLICY_NAMES)})")
    matrix.add_argument("--loads", default="0.5,0.8,1.1", help="comma-separated target offered loads (default 0.5,0.8,1.1)")
    matrix.add_argument("--jobs-per-trace", type=int, default=None, metavar="N", help=JOBS_PER_TRACE_HELP)
    matrix.add_argument("--quick", action="store_true", help="tiny slices (120 jobs per trace), for smoke tests")
    matrix.add_argument("--total-load", action="store_true", help="scale all partitions by the total load instead of each by its own")
    matrix.add_argument("--workers", type=int, default=2, help="processes (cells are independent; default 2)")
    add_json_options(matrix, what="the report")
    matrix.add_argument("--markdown", type=output_file, default=None, metavar="OUT.md", help="also write the table as markdown for bench/README.md")
    matrix.add_argument("--no-progress", action="store_true", help="no per-cell progress on stderr")
    matrix.add_argument("--requeue-cost", default=REQUEUE_COST_DEFAULT, metavar="CHECKPOINT_S,RESTART_S",
                        help="what a preemption costs the job: it keeps the work up to its last checkpoint (one every "
                        "CHECKPOINT_S of run; 0 keeps all) and restarts in RESTART_S; 'free' = 0,0 "
                        f"(default {REQUEUE_COST_DEFAULT})")
    matrix.set_defaults(func=run_bench_policies)


MATRIX_TRACE_NAMES = ("pai", "philly", "gavel")
JOBS_PER_TRACE_HELP = "leading jobs of each trace (default per trace: pai 2000, philly 2000, gavel 1000)"
MATRIX_POLICY_NAMES = ("fifo", "multifactor", "qssf", "spwf", "tiresias", "sjf-oracle", "asrpt/oracle", "asrpt/history", "asrpt/rf",
                       "asrpt-preempt/oracle", "asrpt-preempt/rf")


def _csv_list(text: str, what: str, parse: Callable[[str], Any] = str) -> list[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise AsrptError(f"--{what}: empty list")
    try:
        return [parse(t) for t in items]
    except ValueError:
        raise AsrptError(f"--{what}: not a comma-separated list of numbers: {text!r}") from None


def run_bench_policies(args: argparse.Namespace) -> int:
    import sys

    from asrpt.sim.matrix import QUICK_JOBS, format_markdown, format_table, resolve_traces, run_matrix, stderr_progress

    if args.quick and args.jobs_per_trace is not None:
        raise AsrptError("--quick and --jobs-per-trace are exclusive")
    loads = _csv_list(args.loads, "loads", float)
    if any(not (0 < x < float("inf")) for x in loads):
        raise AsrptError(f"--loads: every load must be a positive number, got {args.loads!r}")
    traces = resolve_traces(_csv_list(args.traces, "traces"), args.traces_dir, lambda m: print(f"asrpt: {m}", file=sys.stderr))
    report = run_matrix(
        traces,
        seeds=_csv_list(args.seeds, "seeds", int),
        policies=_csv_list(args.policies, "policies"),
        loads=loads,
        jobs_per_trace=QUICK_JOBS if args.quick else args.jobs_per_trace,
        per_partition=not args.total_load,
        workers=args.workers,
        progress=None if args.no_progress else stderr_progress,
        requeue_cost=parse_requeue_cost(args.requeue_cost),
    )
    emit_json(args, report)
    if args.markdown is not None:
        args.markdown.write_text(format_markdown(report))
    print(format_table(report), file=table_stream(args))
    return 0


def synthetic_snapshot(pending: int, running: int, nodes: int, seed: int, speed: Any) -> Any:
    """A busy heterogeneous cluster: running jobs fill nodes first-fit, the rest waits."""
    from asrpt.core.model import ClusterSnapshot, Job, Node, ParallelConfig, Partition, Placement, RunningJob

    rng = random.Random(seed)
    types = ("a100", "v100", "t4")
    partitions = tuple(Partition(name=t, accelerator=t) for t in types)
    free = {f"{types[i % 3]}-{i:05d}": 8 for i in range(nodes)}
    node_partition = {name: name.split("-")[0] for name in free}
    classes = speed.workload_classes
    layouts = [(1, 1, 1)] * 6 + [(2, 1, 1), (4, 1, 1), (1, 1, 4), (2, 1, 4), (8, 1, 1), (2, 2, 4)]

    def job(job_id: int) -> Job:
        d, p, t = rng.choice(layouts)
        restrict = () if rng.random() < 0.5 else (rng.choice(types),)
        return Job(
            job_id=str(job_id),
            submit_time_s=rng.uniform(0, 86400),
            parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=4 if p > 1 else 1),
            workload_class=rng.choice(classes),
            user=f"u{rng.randrange(200)}",
            group=f"g{rng.randrange(2000)}",
            allowed_accelerators=restrict,
            predicted_iterations=rng.lognormvariate(8, 2),
            time_limit_s=rng.choice([3600.0, 86400.0, None]),
        )

    running_jobs = []
    for i in range(running):
        j = job(100000 + i)
        for name in free:
            if free[name] >= j.accelerators and j.allows(partitions[types.index(node_partition[name])]):
                free[name] -= j.accelerators
                placement = Placement(job_id=j.job_id, partition=node_partition[name], worker_nodes=(name,) * j.accelerators, iteration_time_s=0.5)
                running_jobs.append(RunningJob(job=j, placement=placement, start_time_s=rng.uniform(0, 86400)))
                break
    node_list = tuple(
        Node(name=name, partition=node_partition[name], accelerator=node_partition[name], accelerators_total=8, accelerators_free=f)
        for name, f in free.items()
    )
    return ClusterSnapshot(partitions=partitions, nodes=node_list, pending=tuple(job(i) for i in range(pending)), running=tuple(running_jobs))


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run_bench_daemon(args: argparse.Namespace) -> int:
    from asrpt.cli.bench_daemon import run_daemon_bench
    from asrpt.daemon.config import POLICY_NAMES

    if args.policy not in POLICY_NAMES:
        print(f"asrpt bench daemon: error: unknown policy {args.policy!r}; valid: {', '.join(POLICY_NAMES)}", file=sys.stderr)
        return 2
    logging.getLogger("asrpt").setLevel(logging.WARNING)
    result = run_daemon_bench(pending=args.pending, running=args.running, nodes=args.nodes, policy=args.policy, seed=args.seed,
                              history=max(0, args.history))
    report = result.as_dict()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"daemon cycles: {result.pending} pending, {result.running} running, {result.nodes} nodes, policy {result.policy}")
    for name, label in (("first", "first (all new)"), ("steady", f"steady ({result.changed_steady} jobs changed)"), ("idle", "idle (no change)")):
        print(f"  {label:<28} {report[name + '_cycle_s']:8.3f} s   {report['writes_' + name]:6d} scontrol writes")
    return 0


def _median_s(repeat: int, work: Callable[[], object]) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def run_bench_cycle(args: argparse.Namespace) -> int:
    import numpy as np

    from asrpt.core.placement import alpha_min_s, best_placement
    from asrpt.core.policies import make_policy
    from asrpt.core.speed import default_speed_table
    from asrpt.core.srpt import VirtualSRPT, virtual_size_s
    from asrpt.predict.features import JobRecord, build_features
    from asrpt.predict.predictor import IterationPredictor

    speed = default_speed_table()
    snapshot = synthetic_snapshot(args.pending, args.running, args.nodes, args.seed, speed)
    policy = make_policy(args.policy, speed)
    now_s = 90000.0

    cycle_s = _median_s(args.repeat, lambda: policy.decide(snapshot, now_s, policy.new_state()))

    capacity = sum(n.accelerators_total for n in snapshot.nodes)
    sizes = [(j.job_id, j.submit_time_s, virtual_size_s(j.accelerators, j.predicted_iterations or 0.0, alpha_min_s(j, snapshot.partitions, snapshot.nodes, speed), capacity)) for j in snapshot.pending]

    def srpt() -> None:
        machine = VirtualSRPT(keep_completed=False)
        for job_id, release_s, size_s in sizes:
            machine.release(job_id, release_s, size_s)
        machine.advance_to(now_s)

    srpt_s = _median_s(args.repeat, srpt)
    placement_s = _median_s(args.repeat, lambda: [best_placement(j, snapshot.nodes, snapshot.partitions, speed) for j in snapshot.pending])

    rng = random.Random(args.seed)
    history = [
        JobRecord(job_id=f"h{i}", user=f"u{rng.randrange(200)}", submit_time_s=float(i), group=f"g{rng.randrange(2000)}",
                  accelerators=float(rng.choice([1, 2, 4, 8])), end_time_s=float(i) + 10.0, iterations=rng.lognormvariate(8, 2))
        for i in range(5000)
    ]
    model = IterationPredictor(n_estimators=50, random_state=0, n_jobs=1).fit(
        build_features(history), np.array([r.iterations for r in history])
    )
    new_rows = [JobRecord(job_id=j.job_id, user=j.user, submit_time_s=1e6, group=j.group, accelerators=float(j.accelerators)) for j in snapshot.pending]
    predict_s = _median_s(args.repeat, lambda: model.predict(build_features([*history, *new_rows])[len(history):]))

    report = {
        "pending": args.pending,
        "running": len(snapshot.running),
        "nodes": args.nodes,
        "policy": args.policy,
        "cycle_s": cycle_s,
        "predict_s": predict_s,
        "srpt_s": srpt_s,
        "placement_s": placement_s,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>12}: {value:.3f}" if isinstance(value, float) else f"{key:>12}: {value}")
    return 0
