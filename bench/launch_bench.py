#!/usr/bin/env python3
"""Launch benchmark (not a test): wall time and peak RSS of

    cpptorchrun --standalone --nproc_per_node=8 --no_python /bin/true

side by side with torchrun's, printed as a table. CPU ms is user + system
time of the whole process tree (median). Peak RSS is the largest
resident set of any process of the run (wait4's ru_maxrss covers the
launcher and its waited-for descendants).

Debian's torchrun (torch 1.13 on Python 3.11) crashes at start-up with its
default --redirects/--tee ("0"): Std.from_str iterates an IntFlag. It runs
when both are given per local rank ("0:1,1:1,..."), which also writes log
files; that is the form measured here, once with torchrun's default
--monitor_interval (5 s: it sleeps that long before first looking at its
workers) and once with 0.1 s.

Usage:
  bazel build --config=bench //launcher:cpptorchrun
  bench/launch_bench.py --cpptorchrun bazel-bin/launcher/cpptorchrun [--runs 20]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def measure(argv, runs, env=None):
    walls, rss, cpu = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - start)
        rss.append(usage.ru_maxrss)  # KiB
        cpu.append((usage.ru_utime + usage.ru_stime) * 1000)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            return None, f"exit code {code}"
    return (statistics.median(walls) * 1000, min(walls) * 1000, statistics.median(cpu), max(rss) / 1024), None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpptorchrun", required=True)
    ap.add_argument("--torchrun", default="/usr/bin/torchrun")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--torchrun_runs", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=8)
    args = ap.parse_args()

    rows = []
    cpp = [args.cpptorchrun, "--standalone", f"--nproc_per_node={args.nproc}", "--log_level=warn",
           "--no_python", "/bin/true"]
    measure(cpp, 2)  # warm the page cache
    rows.append(("cpptorchrun", *measure(cpp, args.runs), args.runs))

    if shutil.which(args.torchrun) or os.path.exists(args.torchrun):
        per_rank = ",".join(f"{i}:1" for i in range(args.nproc))
        with tempfile.TemporaryDirectory() as logs:
            for interval in ("5", "0.1"):
                tr = [args.torchrun, "--standalone", f"--nproc_per_node={args.nproc}", "-r", per_rank,
                      "-t", per_rank, "--log_dir", logs, "--monitor_interval", interval, "--no_python",
                      "/bin/true"]
                rows.append((f"torchrun (monitor_interval {interval})",
                             *measure(tr, args.torchrun_runs), args.torchrun_runs))
    else:
        rows.append(("torchrun", None, "not installed", 0))

    print(f"launch of {args.nproc} x /bin/true, --standalone, --no_python")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times grow with it; CPU ms less so)")
    print(f"{'launcher':34} {'median ms':>10} {'min ms':>8} {'CPU ms':>8} {'peak RSS MB':>12} {'runs':>5}")
    for name, result, error, runs in rows:
        if result is None:
            print(f"{name:34} not runnable: {error}")
        else:
            med, lo, cpu, rss = result
            print(f"{name:34} {med:10.1f} {lo:8.1f} {cpu:8.1f} {rss:12.1f} {runs:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
