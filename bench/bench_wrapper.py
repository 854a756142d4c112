#!/usr/bin/env python3
"""What asrpt-sbatch adds to a submission: wall time of the wrapper over calling sbatch directly.

    python bench/bench_wrapper.py --reps 300
    SLURM_CONF=/path/to/slurm.conf python bench/bench_wrapper.py --reps 300 --real-reps 100

Both arms run as subprocesses of this script, in the same run, interleaved (direct, wrapped,
wrapped, direct, ...) so that drifting machine load hits both alike. Reported: the medians of
each arm and the median (and 90th percentile) of the per-pair difference wrapped - direct, in
wall time, and the median difference in CPU time (user + system of the process and the
children it waited for, from wait4): on a busy machine wall time stretches with the load, CPU
time much less.

Stub arm: a one-line ``/bin/sh`` sbatch that prints ``Submitted batch job $$``. The wrapper
runs as installed (the ``asrpt-sbatch`` console script next to this interpreter), and once
more through the lean launcher (``python -IS``, :mod:`asrpt.submit_wrapper.launcher`); it reads its
configuration from a TOML file like ``/etc/asrpt/asrpt.toml`` (so ``tomllib`` is imported, as
in production), parses a script with ``#SBATCH`` and ``#ASRPT`` lines and writes a record per
submission into a spool directory.

Real arm (only with ``SLURM_CONF`` set): the same against Slurm's ``sbatch`` and a running
cluster, with ``--hold`` (no job runs) and a pause before each run (``--real-pause-ms``);
every job submitted is cancelled at the end.

Python byte-code: a production install has ``.pyc`` files. If the environment sets
``PYTHONDONTWRITEBYTECODE`` (this workplace does), every run would recompile the wrapper's
modules; the benchmark therefore runs the wrapper with ``PYTHONPYCACHEPREFIX`` set to a
private cache (``--no-bytecode-cache`` measures the recompiling case instead).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asrpt.submit_wrapper.launcher import write_launcher

SCRIPT = """#!/bin/bash
#SBATCH --job-name=bench --time=10
#SBATCH --gres=gpu:1
#ASRPT model=llama-7b class=lm parallel=1x1x1 micro_batches=4 iterations=1000
srun hostname
"""
STUB = '#!/bin/sh\necho "Submitted batch job $$"\n'


def run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds of the process and its waited-for children, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()  # outputs are a line: no deadlock reading one pipe after the other
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0 or err:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err.decode(errors='replace')}")
    # wait4 reports the child's usage including the children it waited for (sbatch, for the
    # wrapper): CPU time is what the machine's load does not inflate.
    return elapsed, usage.ru_utime + usage.ru_stime, out


def measure(
    direct: list[str], wrapped: list[str], env: dict[str, str], cwd: str, reps: int, warmup: int, outputs: list[bytes], pause_s: float = 0.0
) -> dict:
    """Interleaved pairs; every stdout goes to ``outputs`` (job ids to cancel). ``pause_s``
    between runs lets slurmctld finish the work a submission triggers (its scheduling pass)
    before the next run starts, so that neither arm pays for the other's submission."""
    for _ in range(warmup):
        outputs.append(run(direct, env, cwd)[2])
        outputs.append(run(wrapped, env, cwd)[2])
    wall: dict[int, list[float]] = {0: [], 1: []}
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for i in range(reps):
        order = ((0, direct), (1, wrapped)) if i % 2 == 0 else ((1, wrapped), (0, direct))
        for arm, argv in order:
            if pause_s:
                time.sleep(pause_s)
            elapsed, cpu_s, out = run(argv, env, cwd)
            wall[arm].append(elapsed)
            cpu[arm].append(cpu_s)
            outputs.append(out)
    diffs = sorted(w - d for w, d in zip(wall[1], wall[0]))
    cpu_diffs = sorted(w - d for w, d in zip(cpu[1], cpu[0]))
    return {
        "reps": reps,
        "direct_median_ms": 1000 * statistics.median(wall[0]),
        "wrapped_median_ms": 1000 * statistics.median(wall[1]),
        "added_median_ms": 1000 * statistics.median(diffs),
        "added_p90_ms": 1000 * diffs[int(0.9 * (len(diffs) - 1))],
        "direct_cpu_median_ms": 1000 * statistics.median(cpu[0]),
        "wrapped_cpu_median_ms": 1000 * statistics.median(cpu[1]),
        "added_cpu_median_ms": 1000 * statistics.median(cpu_diffs),
    }


def python_startup_ms(python: str, env: dict[str, str], reps: int, *flags: str) -> tuple[float, float]:
    """Median (wall, CPU) milliseconds of ``python [flags] -c pass``."""
    runs = [run([python, *flags, "-c", "pass"], env, "/") for _ in range(reps)]
    return 1000 * statistics.median(r[0] for r in runs), 1000 * statistics.median(r[1] for r in runs)


def import_time_ms(python: str, env: dict[str, str], reps: int) -> float:
    """Median cumulative import time of asrpt.submit_wrapper.main (python -X importtime)."""
    values = []
    for _ in range(reps):
        result = subprocess.run([python, "-X", "importtime", "-c", "import asrpt.submit_wrapper.main"], env=env, capture_output=True, check=True)
        for line in result.stderr.decode().splitlines():
            if line.rstrip().endswith("| asrpt.submit_wrapper.main"):
                values.append(int(line.split("|")[1]) / 1000)
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=300, help="pairs against the stub sbatch")
    parser.add_argument("--real-reps", type=int, default=100, help="pairs against the real sbatch (needs SLURM_CONF)")
    parser.add_argument("--real-pause-ms", type=float, default=200.0, help="pause before each real sbatch run")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-bytecode-cache", action="store_true", help="let the wrapper recompile its modules on every run")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    wrapper = Path(sys.executable).with_name("asrpt-sbatch")
    if not wrapper.exists():
        raise SystemExit(f"{wrapper} not found: pip install -e . first")
    work = Path(tempfile.mkdtemp(prefix="asrpt-bench-wrapper-"))
    try:
        stub = work / "sbatch"
        stub.write_text(STUB)
        stub.chmod(0o755)
        spool = work / "spool"
        spool.mkdir(mode=0o1777)
        script = work / "job.sh"
        script.write_text(SCRIPT)
        config = work / "asrpt.toml"
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("ASRPT_") and key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
        }
        env["ASRPT_CONFIG"] = str(config)
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")

        figures: dict[str, object] = {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "load_average_before": os.getloadavg(),
            "bytecode_cache": not args.no_bytecode_cache,
        }
        config.write_text(f'[wrapper]\nreal_sbatch = "{stub}"\n\n[spool]\ndir = "{spool}"\n\n[daemon]\ninterval_s = 10.0\n')
        stub_result = measure([str(stub), str(script)], [str(wrapper), str(script)], env, str(work), args.reps, args.warmup, [])
        recorded = len(list(spool.glob("*.json")))
        expected = args.reps + args.warmup
        if recorded != expected:
            raise SystemExit(f"expected {expected} records, found {recorded}")
        figures["stub"] = stub_result
        lean = work / "asrpt-sbatch-lean"
        write_launcher(lean)
        figures["stub_lean_launcher"] = measure([str(stub), str(script)], [str(lean), str(script)], env, str(work), args.reps, args.warmup, [])
        figures["python_startup_median_ms"], figures["python_startup_cpu_median_ms"] = python_startup_ms(sys.executable, env, 30)
        figures["python_IS_startup_median_ms"], figures["python_IS_startup_cpu_median_ms"] = python_startup_ms(sys.executable, env, 30, "-IS")
        figures["import_asrpt_submit_wrapper_main_median_ms"] = import_time_ms(sys.executable, env, 30)

        if os.environ.get("SLURM_CONF") and args.real_reps > 0:
            real = shutil.which("sbatch", path="/usr/bin:/usr/local/bin:/bin")
            if real is None:
                raise SystemExit("SLURM_CONF is set but no sbatch in /usr/bin, /usr/local/bin, /bin")
            config.write_text(f'[wrapper]\nreal_sbatch = "{real}"\n\n[spool]\ndir = "{spool}"\n')
            sbatch_args = ["--hold", "--parsable", str(script)]
            outputs: list[bytes] = []
            try:
                pause = args.real_pause_ms / 1000
                figures["real"] = measure([real, *sbatch_args], [str(wrapper), *sbatch_args], env, str(work), args.real_reps, args.warmup, outputs, pause)
                figures["real_lean_launcher"] = measure([real, *sbatch_args], [str(lean), *sbatch_args], env, str(work), args.real_reps, args.warmup, outputs, pause)
            finally:
                ids = sorted({out.strip().split(b";")[0].decode() for out in outputs if out.strip()})
                if ids:
                    subprocess.run(["scancel", *ids], env=env, capture_output=True)
        figures["load_average_after"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [("stub sbatch, console script", figures["stub"]), ("stub sbatch, lean launcher (python -IS)", figures["stub_lean_launcher"])]
    if "real" in figures:
        rows.append(("real sbatch (Slurm test-bed), console script", figures["real"]))
        rows.append(("real sbatch (Slurm test-bed), lean launcher", figures["real_lean_launcher"]))
    print(f"python {figures['python']}, {figures['cpus']} CPUs, load average before {figures['load_average_before'][0]:.2f}, after {figures['load_average_after'][0]:.2f}")
    print(
        f"python -c pass: {figures['python_startup_median_ms']:.1f} ms wall, {figures['python_startup_cpu_median_ms']:.1f} ms CPU; "
        f"python -IS -c pass: {figures['python_IS_startup_median_ms']:.1f} ms wall, {figures['python_IS_startup_cpu_median_ms']:.1f} ms CPU; "
        f"import asrpt.submit_wrapper.main: {figures['import_asrpt_submit_wrapper_main_median_ms']:.1f} ms (-X importtime, cumulative)"
    )
    print()
    print("| arm | pairs | direct median | wrapped median | added median (p90) | added CPU median |")
    print("|---|---|---|---|---|---|")
    for name, row in rows:
        print(
            f"| {name} | {row['reps']} | {row['direct_median_ms']:.1f} ms | {row['wrapped_median_ms']:.1f} ms | "
            f"**{row['added_median_ms']:.1f} ms** ({row['added_p90_ms']:.1f} ms) | {row['added_cpu_median_ms']:.1f} ms |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
