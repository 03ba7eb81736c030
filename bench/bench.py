"""cpptorchrun's benchmark runner: every benchmark of the project in one
run, beside the reference (torchrun, the Python DDP loop) where the machine
has it, interleaved A, B, A, B so that ratios hold on a noisy machine.

Writes bench/results.json (every sample, machine-readable), bench/REPORT.md
(tables: median, min, max) and PNG plots drawn with gnuplot. Run it through
tools/bench, which builds the binaries with --config=bench first and runs
this as the module bench.bench from the repository root.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench import (compression_bench, ddp_bench, goodput_bench, hierarchical_bench, optimizer_bench, recovery_bench,
                   train_bench)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"  # Debian's interpreter, the one with torch


# --- measuring ----------------------------------------------------------------

class Measured:
    """One timed run: wall seconds, peak RSS in MB of the largest process of
    the tree that was waited for, CPU seconds (user + system) of that tree,
    exit code, and whether the timeout killed it."""

    def __init__(self, wall, rss_mb, cpu, code, timed_out):
        self.wall, self.rss_mb, self.cpu, self.code, self.timed_out = wall, rss_mb, cpu, code, timed_out

    def failure(self, what):
        """None when the run succeeded, else why it did not, for the report."""
        if self.timed_out:
            return "%s killed by the timeout after %.1f s" % (what, self.wall)
        return None if self.code == 0 else "%s exited %d" % (what, self.code)


def run_measured(argv, env=None, timeout=600, cwd=None, stdout=subprocess.DEVNULL):
    """Runs argv in a session of its own and blocks in waitid until it
    exits, so that nothing polls beside the run being timed; a timer thread
    kills the session after `timeout` s. The exit is first seen without
    reaping (WNOWAIT): until wait4 reaps the child its pid, the session's
    id, cannot be reused, so the timer never signals a stranger."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    lock = threading.Lock()
    state = {"exited": False, "killed": False}
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=full_env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
                         start_new_session=True)

    def kill():
        with lock:
            if not state["exited"]:
                state["killed"] = True
                os.killpg(p.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - t0
    with lock:
        state["exited"] = True
    timer.cancel()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return Measured(wall, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime, p.returncode,
                    state["killed"])


class Results:
    """Figures: name -> {unit, better, samples}; notes per section; and every
    failed run per section, [{"run", "reason"}], which the report counts
    and lists (a run retried after a failure is in the figures once and in
    the failures once per failed attempt)."""

    def __init__(self):
        self.figures = {}
        self.notes = {}
        self.failed_runs = {}

    def add(self, name, value, unit, better="lower"):
        f = self.figures.setdefault(name, {"unit": unit, "better": better, "samples": []})
        f["samples"].append(value)

    def note(self, section, text):
        self.notes.setdefault(section, []).append(text)

    def failed(self, section, run, reason):
        self.failed_runs.setdefault(section, []).append({"run": run, "reason": reason})

    def stat(self, name):
        s = self.figures.get(name, {}).get("samples") or []
        if not s:
            return None
        return {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s)}

    def summary(self):
        out = {}
        for name, f in self.figures.items():
            st = self.stat(name)
            out[name] = dict(st, unit=f["unit"], better=f["better"], samples=f["samples"])
        return out


def interleave(variants, repeat):
    """Runs each variant once per round, the order A, B, A, B ..."""
    for _ in range(repeat):
        for fn in variants:
            fn()


def have_torch():
    return train_bench.torch_available()


# --- sections -------------------------------------------------------------------

def section_launch(ctx, res):
    """Wall time, CPU time and peak RSS of launching N no-op workers."""
    launcher = os.path.join(ctx.bin, "launcher", "cpptorchrun")
    torch_ok = have_torch()
    if not torch_ok:
        res.note("launch", "torchrun not measured: %s has no torch" % PY)
    # One untimed launch first: the binaries and libraries into the page cache.
    run_measured([launcher, "--standalone", "--nproc_per_node=1", "--no_python", "/bin/true"], timeout=60)
    for n in (1, 2, 4, 8):
        # torchrun takes seconds a launch: --quick repeats the small sizes less.
        repeat = (3 if n == 8 else 2) if ctx.quick else 15
        ours = lambda n=n: launch_once(res, "cpptorchrun", n, [launcher])
        ref = lambda n=n: launch_once(res, "torchrun", n, [PY, os.path.join(ROOT, "bench", "torchrun_ref.py")])
        interleave([ours] + ([ref] if torch_ok else []), repeat)
    res.note("launch", "peak RSS is ru_maxrss from wait4: the largest single process "
                       "of the launcher's tree (the launcher itself for /bin/true workers); "
                       "CPU is user + system time of the launcher and the workers it reaped")


def launch_once(res, who, n, launcher_argv):
    """One timed `<launcher> --standalone --nproc_per_node=n --no_python
    /bin/true`; a failed launch is recorded and fails the section."""
    m = run_measured(list(launcher_argv) + ["--standalone", "--nproc_per_node=%d" % n, "--no_python",
                                            "/bin/true"], timeout=120)
    why = m.failure("%s --nproc_per_node=%d" % (who, n))
    if why:
        res.failed("launch", "%s/nproc=%d" % (who, n), why)
        raise RuntimeError(why)
    res.add("launch/%s/nproc=%d/wall_ms" % (who, n), m.wall * 1e3, "ms")
    res.add("launch/%s/nproc=%d/cpu_ms" % (who, n), m.cpu * 1e3, "ms")
    res.add("launch/%s/nproc=%d/peak_rss_mb" % (who, n), m.rss_mb, "MB")


def section_rendezvous(ctx, res):
    """N simulated agents (8 ranks each) forming one round, then every rank
    reading the round's NCCL unique id; server in its own process."""
    bench = os.path.join(ctx.bin, "rendezvous", "rendezvous_bench")
    sizes = (100, 1000, 10000)
    repeat = 2 if ctx.quick else 5
    for _ in range(repeat):
        for n in sizes:
            r = subprocess.run([bench, "--sizes=%d" % n, "--json"], capture_output=True, text=True,
                               timeout=600)
            rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            if r.returncode != 0 or not rows or not rows[0].get("ok"):
                raise RuntimeError("rendezvous_bench N=%d failed: %s" % (n, r.stderr[-500:]))
            row = rows[0]
            res.add("rendezvous/N=%d/round_s" % n, row["round_s"], "s")
            res.add("rendezvous/N=%d/store_s" % n, row["store_s"], "s")
            res.add("rendezvous/N=%d/total_s" % n, row["round_s"] + row["store_s"], "s")
            res.add("rendezvous/N=%d/server_peak_rss_mb" % n, row["server_peak_rss_mib"] * 1.048576, "MB")
    res.note("rendezvous", "no reference ran: PyTorch's TCPStore needs ~100 s for 96K ranks "
                           "(libuv backend, PyTorch's own figure), not reproducible at that scale here")


def section_rendezvous_backends(ctx, res):
    """The rendezvous on etcd beside the gRPC service, through the same
    client interface: N agents forming a round and reading its NCCL id, on
    each backend in turn, and on etcd with its leader killed as they join."""
    bench = os.path.join(ctx.bin, "rendezvous", "etcd", "backends_bench")
    sizes = "10,50" if ctx.quick else "10,50,100"
    r = subprocess.run([bench, "--sizes=" + sizes, "--repeat=%d" % (2 if ctx.quick else 3), "--json"],
                       capture_output=True, text=True, timeout=1800)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not rows or not all(row["ok"] for row in rows):
        raise RuntimeError("backends_bench failed: %s" % r.stderr[-800:])
    for row in rows:
        key = "rendezvous_backends/%s/%s/N=%d" % (row["backend"], row["scenario"], row["n"])
        res.add(key + "/round_s", row["round_s"], "s")
        res.add(key + "/store_s", row["store_s"], "s")
    res.note("rendezvous_backends", "each agent its own client (a node's launcher); gRPC: the service in the "
                                    "bench's process; etcd: 3 members on loopback, one process each; "
                                    "leader_killed: kill -9 of etcd's leader as the agents start joining")


def section_fuzz(ctx, res):
    """Every fuzz target under clang's libFuzzer (coverage-guided, ASan and
    UBSan), from its seed corpus, for a fixed time each (tools/fuzz/run)."""
    seconds = 15 if ctx.quick else 120
    r = subprocess.run([os.path.join(ROOT, "tools", "fuzz", "run"), str(seconds)], capture_output=True,
                       text=True, timeout=seconds * 10 + 1800)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if not rows:
        raise RuntimeError("tools/fuzz/run produced nothing: %s" % r.stderr[-800:])
    for row in rows:
        res.add("fuzz/%s/executions" % row["target"], row["executions"], "runs", better="higher")
        res.add("fuzz/%s/crashes" % row["target"], row["crashes"], "crashes")
    res.note("fuzz", "each target %d s from its seeds (tools/fuzz/corpus), clang %s libFuzzer, "
                     "-fsanitize=address,undefined" % (seconds, "14"))
    if r.returncode != 0:
        raise RuntimeError("a fuzz target crashed: %s" % r.stderr[-800:])


SECTIONS = {"launch": section_launch, "rendezvous": section_rendezvous,
            "training": train_bench.section_training, "ddp": ddp_bench.section_ddp,
            "recovery": recovery_bench.section_recovery, "fuzz": section_fuzz,
            "allreduce": ddp_bench.section_allreduce,
            "optimizers": optimizer_bench.section_optimizers,
            "hierarchical": hierarchical_bench.section_hierarchical,
            "compression": compression_bench.section_compression,
            "rendezvous_backends": section_rendezvous_backends, "goodput": goodput_bench.section_goodput}


def register(name, fn):
    SECTIONS[name] = fn


# --- report --------------------------------------------------------------------

def machine_info():
    def out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "n/a"
    cpu = "n/a"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    torch_v = out([PY, "-c", "import torch; print(torch.__version__)"]) if os.path.exists(PY) else "n/a"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host_cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gcc": out(["gcc", "-dumpfullversion"]), "bazel": (out(["bazel", "--version"]).splitlines() or ["n/a"])[-1],
        "python_torch": torch_v, "git": out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        # Files changed against that commit when the run started ("": none).
        "dirty": out(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).replace("\n", "; "),
    }


def fmt(v):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return "%.3g" % v


def write_report(ctx, res, info, plots):
    lines = ["# cpptorchrun benchmark report", "",
             "Written by `tools/bench%s`, started %s; do not edit by hand." % (
                 " --quick" if ctx.quick else "", info["date"]),
             "",
             "Machine: %s, %s cores, %s GiB, Linux %s; gcc %s; PyTorch (reference) %s; commit %s%s." % (
                 info["host_cpu"], info["cores"], info["memory_gb"], info["kernel"], info["gcc"],
                 info["python_torch"], info["git"],
                 " with uncommitted changes (%s)" % info["dirty"] if info.get("dirty") else ""),
             "", "Each figure: median (min-max) over n runs; the reference ran in the same run, interleaved.", ""]
    summary = res.summary()
    sections = sorted({k.split("/")[0] for k in summary} | set(res.notes) | set(res.failed_runs))
    for sec in sections:
        lines += ["## " + sec, ""]
        rows = [(k, v) for k, v in sorted(summary.items()) if k.startswith(sec + "/")]
        if rows:
            lines += ["| figure | median | min | max | n | unit |", "| --- | --- | --- | --- | --- | --- |"]
            for k, v in rows:
                lines.append("| %s | %s | %s | %s | %d | %s |" % (
                    k[len(sec) + 1:], fmt(v["median"]), fmt(v["min"]), fmt(v["max"]), v["n"], v["unit"]))
            lines.append("")
        for r in ctx.ratios.get(sec, []):
            lines.append("- " + r)
        for n in res.notes.get(sec, []):
            lines.append("- " + n)
        failed = res.failed_runs.get(sec, [])
        if failed:
            lines.append("- failed runs: %d" % len(failed))
            lines += ["  - %s: %s" % (f["run"], f["reason"]) for f in failed]
        for p in plots.get(sec, []):
            lines += ["", "![%s](%s)" % (os.path.basename(p), os.path.basename(p))]
        lines.append("")
    with open(os.path.join(ctx.out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines))


def gnuplot(png, title, xlabel, ylabel, series, logx=False, logy=False):
    """series: list of (label, [(x, y)]). Returns the PNG's path or None."""
    if not shutil.which("gnuplot") or not any(pts for _, pts in series):
        return None
    tmp = tempfile.mkdtemp()
    cmds = ["set terminal pngcairo size 800,500 noenhanced", "set output '%s'" % png,
            "set title '%s'" % title, "set xlabel '%s'" % xlabel, "set ylabel '%s'" % ylabel,
            "set grid", "set key top left"]
    if logx:
        cmds.append("set logscale x")
    if logy:
        cmds.append("set logscale y")
    plots = []
    for i, (label, pts) in enumerate(series):
        if not pts:
            continue
        path = os.path.join(tmp, "s%d.dat" % i)
        with open(path, "w") as f:
            for x, y in pts:
                f.write("%g %g\n" % (x, y))
        plots.append("'%s' using 1:2 with linespoints title '%s'" % (path, label))
    cmds.append("plot " + ", ".join(plots))
    r = subprocess.run(["gnuplot"], input="\n".join(cmds).encode(), capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return png if r.returncode == 0 else None


def ratio(res, a, b):
    sa, sb = res.stat(a), res.stat(b)
    if not sa or not sb or not sb["median"]:
        return None
    return sa["median"] / sb["median"]


def compare(old_path, res):
    with open(old_path) as f:
        old = json.load(f)["figures"]
    new = res.summary() if isinstance(res, Results) else res
    print("%-60s %12s %12s %9s" % ("figure", "old", "new", "change"))
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        if not o or not n:
            print("%-60s %12s %12s %9s" % (name, fmt(o and o["median"]), fmt(n and n["median"]), "-"))
            continue
        change = (n["median"] - o["median"]) / o["median"] * 100 if o["median"] else 0.0
        better = (change < 0) == (n.get("better", "lower") == "lower")
        print("%-60s %12s %12s %+8.1f%% %s" % (name, fmt(o["median"]), fmt(n["median"]), change,
                                                "" if abs(change) < 1 else ("better" if better else "worse")))


class Ctx:
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", default="", help="bazel-bin of the --config=bench build")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and sizes (< 5 minutes)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench"))
    ap.add_argument("--compare", default="", help="an earlier results.json to compare against")
    ap.add_argument("--compare_only", action="store_true", help="compare --compare with --out's results.json")
    ap.add_argument("--report_only", action="store_true",
                    help="redraw REPORT.md and the plots from --out's results.json, measuring nothing")
    args = ap.parse_args()
    # A run stopped with SIGTERM (timeout, kill) unwinds as on Ctrl-C: each
    # section's clean-up runs (its launchers and namespaces go with it).
    signal.signal(signal.SIGTERM, lambda signo, _: sys.exit(128 + signo))
    if args.compare_only:
        with open(os.path.join(args.out, "results.json")) as f:
            compare(args.compare, json.load(f)["figures"])
        return 0
    ctx = Ctx()
    ctx.bin, ctx.quick, ctx.out, ctx.ratios = args.bin, args.quick, args.out, {}
    res = Results()
    if args.report_only:
        with open(os.path.join(args.out, "results.json")) as f:
            old = json.load(f)
        for name, fig in old["figures"].items():
            for v in fig["samples"]:
                res.add(name, v, fig["unit"], fig.get("better", "lower"))
        res.notes = old.get("notes", {})
        res.failed_runs = old.get("failed_runs", {})
        ctx.quick = old.get("quick", False)
        write_report(ctx, res, old["machine"], make_plots(ctx, res))
        return 0
    only = [s for s in args.only.split(",") if s] or list(SECTIONS)
    # The commit (and changes) measured: taken now, before the sections run,
    # so a commit made meanwhile is not named.
    info = machine_info()
    t0 = time.monotonic()
    failed = []
    for name in only:
        if name not in SECTIONS:
            print("unknown section '%s'; known: %s" % (name, ", ".join(SECTIONS)), file=sys.stderr)
            return 2
        print("== %s" % name, flush=True)
        s0 = time.monotonic()
        try:
            SECTIONS[name](ctx, res)
        except Exception as e:  # a broken section is reported, the others still run
            res.note(name, "FAILED: %s" % e)
            print("section %s failed: %s" % (name, e), file=sys.stderr)
            failed.append(name)
        print("   %s took %.0f s" % (name, time.monotonic() - s0), flush=True)
    os.makedirs(ctx.out, exist_ok=True)
    plots = make_plots(ctx, res)
    with open(os.path.join(ctx.out, "results.json"), "w") as f:
        json.dump({"machine": info, "quick": ctx.quick, "figures": res.summary(), "notes": res.notes,
                   "failed_runs": res.failed_runs, "ratios": ctx.ratios}, f, indent=1, sort_keys=True)
    write_report(ctx, res, info, plots)
    print("wrote %s/results.json and %s/REPORT.md in %.0f s" % (ctx.out, ctx.out, time.monotonic() - t0))
    if args.compare:
        compare(args.compare, res)
    for sec, runs in sorted(res.failed_runs.items()):
        print("%s: %d failed run(s): %s" % (sec, len(runs), "; ".join(
            "%s (%s)" % (f["run"], f["reason"]) for f in runs)), file=sys.stderr)
    if failed:
        print("failed sections: %s" % ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def make_plots(ctx, res):
    plots = {}
    for hook in PLOTS:
        for sec, path in hook(ctx, res):
            if path:
                plots.setdefault(sec, []).append(path)
    return plots


def _launch_plot(ctx, res):
    series = []
    for who in ("cpptorchrun", "torchrun"):
        pts = []
        for n in (1, 2, 4, 8):
            st = res.stat("launch/%s/nproc=%d/wall_ms" % (who, n))
            if st:
                pts.append((n, st["median"]))
        series.append((who, pts))
    for n in (1, 2, 4, 8):
        r = ratio(res, "launch/torchrun/nproc=%d/wall_ms" % n, "launch/cpptorchrun/nproc=%d/wall_ms" % n)
        if r:
            ctx.ratios.setdefault("launch", []).append(
                "nproc=%d: torchrun takes %.0fx cpptorchrun's wall time" % (n, r))
    yield "launch", gnuplot(os.path.join(ctx.out, "launch.png"), "launch wall time (median)",
                            "workers (--nproc_per_node)", "ms", series, logy=True)


def fit_exponent(points):
    """Least-squares slope of log(y) over log(x): time ~ N^k."""
    import math
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def _rendezvous_plot(ctx, res):
    series = []
    for what in ("round_s", "store_s", "total_s"):
        pts = [(n, res.stat("rendezvous/N=%d/%s" % (n, what))["median"])
               for n in (100, 1000, 10000) if res.stat("rendezvous/N=%d/%s" % (n, what))]
        series.append((what, pts))
        k = fit_exponent(pts)
        if k is not None:
            ctx.ratios.setdefault("rendezvous", []).append("%s grows as N^%.2f (least squares on log-log)" % (what, k))
    st = res.stat("rendezvous/N=10000/total_s")
    if st:
        ctx.ratios.setdefault("rendezvous", []).append(
            "N=10,000 (80,000 ranks): %.1f s median, goal <= 10 s" % st["median"])
    yield "rendezvous", gnuplot(os.path.join(ctx.out, "rendezvous.png"), "rendezvous time vs agents",
                                "agents N (8 ranks each)", "seconds", series, logx=True, logy=True)


def _training_plot(ctx, res):
    series = []
    for who in ("cpptorchrun", "python"):
        pts = [(w, res.stat("training/%s/world=%d/samples_per_s" % (who, w))["median"])
               for w in (1, 2) if res.stat("training/%s/world=%d/samples_per_s" % (who, w))]
        series.append((who, pts))
    yield "training", gnuplot(os.path.join(ctx.out, "training.png"), "training throughput (median)",
                              "world size (ranks)", "samples/s", series)


def _recovery_plot(ctx, res):
    series = []
    for who in ("cpptorchrun/one_node", "cpptorchrun/one_node_cold", "cpptorchrun/two_nodes", "torchrun/one_node",
                "cpptorchrun_python_spawn/one_node", "cpptorchrun_python_forkserver/one_node"):
        f = res.figures.get("recovery/%s/kill_to_first_step_ms" % who)
        series.append((who.replace("/", ", ").replace("_", " "),
                       list(enumerate(f["samples"], 1)) if f else []))
    r = ratio(res, "recovery/torchrun/one_node/kill_to_first_step_ms",
              "recovery/cpptorchrun/one_node/kill_to_first_step_ms")
    if r:
        ctx.ratios.setdefault("recovery", []).append(
            "one node, kill -9 to the first step: torchrun takes %.1fx cpptorchrun's time" % r)
    for who, goal in (("cpptorchrun/one_node", 300), ("cpptorchrun/two_nodes", 600),
                      ("cpptorchrun_python_forkserver/one_node", 500)):
        st = res.stat("recovery/%s/kill_to_first_step_ms" % who)
        if st:
            ctx.ratios.setdefault("recovery", []).append(
                "%s: %.0f ms median from kill -9 to the first step, goal <= %d ms" % (who, st["median"], goal))
    r = ratio(res, "recovery/torchrun/one_node/kill_to_first_step_ms",
              "recovery/cpptorchrun_python_forkserver/one_node/kill_to_first_step_ms")
    if r:
        ctx.ratios.setdefault("recovery", []).append(
            "one node, the same Python DDP: torchrun takes %.1fx cpptorchrun --start_method forkserver's time" % r)
    yield "recovery", gnuplot(os.path.join(ctx.out, "recovery.png"), "kill -9 of a worker to the first step",
                              "kill", "ms", series)


PLOTS = [_launch_plot, _rendezvous_plot, _training_plot, _recovery_plot]

if __name__ == "__main__":
    sys.exit(main())
