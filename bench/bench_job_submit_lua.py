#!/usr/bin/env python3
"""What contrib/slurm/job_submit.lua adds to a submission: sbatch with and without the plugin.

    python bench/bench_job_submit_lua.py                 # as root, Slurm installed (test-bed)
    python bench/bench_job_submit_lua.py --reps 300 --queue 0,1000 --script-kib 1,64

Two test-beds run side by side on this machine (contrib/slurm/testbed/up.sh, one with
``--with-lua-plugin``, one without), so both arms share the machine, the Slurm build and the
run. Each case submits ``--reps`` held jobs (``sbatch --hold``, nothing runs) to each, interleaved
(plugin, plain, plain, plugin, ...) so drifting load hits both alike, and reports per arm:

* the median and 90th percentile of sbatch's wall time (client start to exit);
* the median of the per-pair difference (plugin - plain);
* slurmctld's CPU time per submission (utime + stime of the slurmctld process from /proc,
  over the whole case, divided by the submissions): the plugin's own cost lands here.

Cases: the script size (``--script-kib``: a typical script padded with comment lines; the
plugin hashes and copies at most 64 KiB) and the number of jobs slurmctld holds (``--queue``:
held jobs submitted before the cases; the submissions of earlier cases stay queued too, so the
table reports the count at the start of each case). job_submit/lua hands the script a table of
every job slurmctld holds, rebuilt whenever the job list changed: Slurm's cost of any Lua
plugin, which grows with the queue.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "contrib" / "slurm" / "testbed"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
HEADER = """#!/bin/bash
#SBATCH --job-name=bench -o /dev/null
#SBATCH -p a100 --gres=gpu:a100:2 --time=30
#ASRPT model=llama-7b class=lm parallel=2x1x1 micro_batches=4 iterations=1000
"""


class Bed:
    def __init__(self, lua: bool) -> None:
        self.lua = lua
        self.dir = Path(tempfile.mkdtemp(prefix=f"asrpt-bench-{'lua' if lua else 'plain'}-", dir="/tmp"))
        self.env = {**os.environ, "PATH": SBIN_PATH, "SLURM_CONF": str(self.dir / "etc" / "slurm.conf")}
        self.env.pop("ASRPT_TESTBED_LUA", None)

    def up(self) -> None:
        argv = [str(TESTBED / "up.sh"), str(self.dir)] + (["--with-lua-plugin"] if self.lua else [])
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=180)
        if done.returncode != 0:
            raise SystemExit(f"up.sh failed:\n{done.stderr[-2000:]}")

    def down(self) -> None:
        subprocess.run([str(TESTBED / "down.sh"), str(self.dir), "--purge"], capture_output=True, env=self.env, timeout=180)

    def ctld_cpu_s(self) -> float:
        pid = (self.dir / "run" / "slurmctld.pid").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sbatch(self, script: Path) -> float:
        started = time.perf_counter()
        done = subprocess.run(["sbatch", "--parsable", "--hold", str(script)], capture_output=True, env=self.env,
                              cwd=self.dir, timeout=60)  # fmt: skip
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"sbatch failed: {done.stderr.decode(errors='replace')}")
        return elapsed

    def fill(self, count: int) -> None:
        loop = f"for i in $(seq {count}); do sbatch --hold -o /dev/null -J filler --wrap true >/dev/null; done"
        subprocess.run(["bash", "-c", loop], env=self.env, cwd=self.dir, check=True, timeout=3600)

    def job_count(self) -> int:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True, env=self.env)
        return len(out.stdout.split())

    def cancel_all(self) -> None:
        subprocess.run(["scancel", "--state=PENDING"], env=self.env, timeout=120)


def script_of(kib: float, folder: Path) -> Path:
    body = HEADER
    while len(body) < kib * 1024:
        body += "# padding line to make the script as long as a real one with comments\n"
    body += "srun python train.py --config configs/llama.yaml\n"
    path = folder / f"job-{kib:g}k.sh"
    path.write_text(body)
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="submissions per arm and case")
    parser.add_argument("--queue", default="0,1000", help="jobs already queued, comma-separated cases")
    parser.add_argument("--script-kib", default="1,64", help="script sizes in KiB, comma-separated cases")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld", path=SBIN_PATH) is None:
        print("needs root and Slurm (apt-get install slurmctld slurmd slurm-client munge)", file=sys.stderr)
        return 2
    version = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, env={"PATH": SBIN_PATH}).stdout.strip()
    beds = [Bed(lua=True), Bed(lua=False)]
    work = Path(tempfile.mkdtemp(prefix="asrpt-bench-scripts-"))
    rows = []
    try:
        for bed in beds:
            bed.up()
        queued = 0
        for queue in sorted(int(q) for q in args.queue.split(",")):
            for bed in beds:
                bed.fill(queue - queued)
            queued = queue
            for kib in (float(k) for k in args.script_kib.split(",")):
                script = script_of(kib, work)
                held = beds[0].job_count()
                times: dict[bool, list[float]] = {True: [], False: []}
                cpu0 = {bed.lua: bed.ctld_cpu_s() for bed in beds}
                for rep in range(args.reps):
                    order = beds if rep % 2 == 0 else beds[::-1]
                    for bed in order:
                        times[bed.lua].append(bed.sbatch(script))
                cpu = {bed.lua: (bed.ctld_cpu_s() - cpu0[bed.lua]) / args.reps for bed in beds}
                diffs = [a - b for a, b in zip(times[True], times[False])]
                rows.append((held, kib, times, diffs, cpu))
                print(f"{held} jobs held, script {kib:g} KiB: plugin {statistics.median(times[True]) * 1e3:.1f} ms, "
                      f"plain {statistics.median(times[False]) * 1e3:.1f} ms", file=sys.stderr)  # fmt: skip
    finally:
        for bed in beds:
            bed.cancel_all()
            bed.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{version}, {os.cpu_count()} CPUs, {args.reps} submissions per arm and case (sbatch --hold)\n")
    print("| jobs in slurmctld | script | sbatch median, plugin | sbatch median, plain | median of differences | p90 plugin / plain | slurmctld CPU per submit, plugin / plain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for queue, kib, times, diffs, cpu in rows:
        print(f"| {queue} | {kib:g} KiB | {statistics.median(times[True]) * 1e3:.1f} ms | "
              f"{statistics.median(times[False]) * 1e3:.1f} ms | {statistics.median(diffs) * 1e3:+.1f} ms | "
              f"{percentile(times[True], 0.9) * 1e3:.1f} / {percentile(times[False], 0.9) * 1e3:.1f} ms | "
              f"{cpu[True] * 1e3:.2f} / {cpu[False] * 1e3:.2f} ms |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
