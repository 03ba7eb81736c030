"""Self-check of tests/slurm_cluster.py, and a record of what Slurm 22.05
does to the processes of a job, which scenarios under Slurm rely on:
  1. srun -N2 runs one task on each host, in its namespace (hostname h0, h1);
  2. the SLURM_* variables srun gives a task;
  3. a step on part of an allocation (its node list against the job's), and
     two steps of one allocation at once (which flags that takes);
  4. scancel --signal=USR1: which processes of a step get it, how often, and
     from whom (the task, and its child in a process group of its own);
  5. sbatch --requeue + scontrol requeue: the job runs again, same id,
     SLURM_RESTART_COUNT=1;
  6. scancel of a running srun step: what its processes get (SIGCONT,
     SIGTERM, SIGKILL after KillWait), and from whom;
  7. two start/stop cycles leave no process and no namespace behind.
Run from the repository root as root:
    /usr/bin/python3 -m tests.slurm_cluster_selfcheck
It prints what it finds, PASS or FAIL for each check, and exits non-zero on
a failure (0 with SKIP where no cluster can be made here)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from tests import harness
from tests.slurm_cluster import SlurmCluster, available

PY = "/usr/bin/python3"

# A step's task for checks 4 and 6: blocks the signals of interest and takes
# them with sigtimedwait (so it learns each sender's pid), after forking a
# child that moves to a process group of its own and does the same; each
# writes what it gets, with the sender's command name, to its own file.
SIGPROBE = r'''
import os, signal, sys, time
out, node = sys.argv[1], os.environ.get("SLURMD_NODENAME", "?")
SIGS = [signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGCONT, signal.SIGINT, signal.SIGHUP]
signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)

def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"

def listen(role):
    with open(os.path.join(out, "%s-%s" % (node, role)), "a", buffering=1) as f:
        f.write("ready pid=%d pgid=%d sid=%d job=%s step=%s\n" % (os.getpid(), os.getpgrp(), os.getsid(0),
                os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = signal.sigtimedwait(SIGS, 1.0)
            if info:
                f.write("sig %s from=%d comm=%s t=%.3f\n" % (signal.Signals(info.si_signo).name,
                        info.si_pid, comm(info.si_pid), time.time()))

if os.fork() == 0:
    os.setpgrp()
    listen("child")
    os._exit(0)
listen("task")
'''

# A step's task for check 3: marks its step in a folder and waits (at most
# argv[2] s) until another step of the job has marked it too.
MEET = r'''
import os, sys, time
d = sys.argv[1]
me = "%s.%s-%s" % (os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_ID"], os.environ["SLURMD_NODENAME"])
open(os.path.join(d, me), "w").close()
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    steps = sorted({f.split("-")[0] for f in os.listdir(d)})
    if len(steps) >= 2:
        print(me, "met", ",".join(steps))
        break
    time.sleep(0.05)
else:
    print(me, "alone")
'''

REQUEUE_SCRIPT = """#!/bin/bash
echo "job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-unset} host=$(hostname)" >> %s
exec sleep 120
"""


def env_lines(text):
    """{task: {VAR: value}} from `srun -l env` output."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\d+): (\w+)=(.*)", line)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return out


def check_hostname(slurm, work):
    r = slurm.run(["srun", "-N2", "--ntasks-per-node=1", "hostname"], timeout=60)
    names = sorted(r.stdout.split())
    print("    srun -N2 --ntasks-per-node=1 hostname ->", names)
    assert names == ["h0", "h1"], names
    r = slurm.run(["bash", "-c", "hostname; srun -N1 -w h0 hostname"], timeout=60, host=slurm.hosts[1])
    print("    hostname; srun -N1 -w h0 hostname, as a client on h1 ->", r.stdout.split())
    assert r.stdout.split() == ["h1", "h0"], r.stdout


def check_env(slurm, work):
    r = slurm.run(["srun", "-N2", "--ntasks-per-node=1", "-l", "env"], timeout=60)
    tasks = env_lines(r.stdout)
    assert sorted(tasks) == [0, 1], r.stdout
    for t in sorted(tasks):
        print("    task %d:" % t)
        for k in sorted(tasks[t]):
            if k.startswith(("SLURM_", "SLURMD_")):
                print("      %s=%s" % (k, tasks[t][k]))
    need = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_NODEID",
            "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID", "SLURM_PROCID"]
    for t in tasks:
        missing = [k for k in need if k not in tasks[t]]
        assert not missing, "task %d lacks %s" % (t, missing)
        assert tasks[t]["SLURM_STEP_NODELIST"] == "h[0-1]" and tasks[t]["SLURM_JOB_NODELIST"] == "h[0-1]"
        assert tasks[t]["SLURM_NODEID"] == str(t) and tasks[t]["SLURM_PROCID"] == str(t)
        assert tasks[t]["SLURMD_NODENAME"] == "h%d" % t


def check_partial_and_concurrent_steps(slurm, work):
    # A step on one node of a two-node allocation, from inside the allocation.
    r = slurm.run(["salloc", "-N2", "bash", "-c",
                   "srun -N1 -w h1 env | grep -E '^SLURM_(STEP_NODELIST|JOB_NODELIST|NODEID|STEP_ID"
                   "|STEP_NUM_NODES|JOB_NUM_NODES|NNODES)=' | sort"], timeout=60)
    inside = dict(l.split("=", 1) for l in r.stdout.split())
    print("    salloc -N2 + srun -N1 -w h1 (inside the allocation):", inside)
    assert inside["SLURM_STEP_NODELIST"] == "h1" and inside["SLURM_JOB_NODELIST"] == "h[0-1]", inside
    # The same from outside it: srun --jobid on an allocation made with --no-shell.
    r = slurm.run(["salloc", "-N2", "--no-shell"], timeout=60)
    job = re.search(r"Granted job allocation (\d+)", r.stderr).group(1)
    r = slurm.run(["bash", "-c", "srun --jobid=%s -N1 -w h1 env | grep -E '^SLURM_(STEP_NODELIST|JOB_NODELIST"
                   "|NODEID|STEP_ID)=' | sort" % job], timeout=60)
    outside = dict(l.split("=", 1) for l in r.stdout.split())
    print("    salloc -N2 --no-shell (job %s) + srun --jobid=%s -N1 -w h1 (outside):" % (job, job), outside)
    assert outside["SLURM_STEP_NODELIST"] == "h1", outside
    # Two steps at once, by srun --jobid from outside, with --overlap.
    prog = os.path.join(work, "meet.py")
    with open(prog, "w") as f:
        f.write(MEET)
    d = os.path.join(work, "meet-jobid")
    os.makedirs(d)
    a = slurm.spawn(["srun", "--jobid=" + job, "-N2", "--overlap", PY, prog, d, "20"],
                    log=os.path.join(work, "meet-jobid-a.out"))
    b = slurm.spawn(["srun", "--jobid=" + job, "-N2", "--overlap", PY, prog, d, "20"],
                    log=os.path.join(work, "meet-jobid-b.out"))
    a.wait(timeout=60)
    b.wait(timeout=60)
    lines = []
    for x in "ab":
        with open(os.path.join(work, "meet-jobid-%s.out" % x)) as f:
            lines += f.read().split("\n")
    lines = sorted(l for l in lines if l)
    print("    srun --jobid=%s -N2 --overlap, twice at once:" % job, lines)
    assert len(lines) == 4 and all(" met " in l for l in lines), lines
    slurm.cancel(job)

    cases = [
        ("no flags", "-N2", "srun -N2 $MEET & srun -N2 $MEET & wait", False),
        ("--overlap", "-N2", "srun -N2 --overlap $MEET & srun -N2 --overlap $MEET & wait", True),
        ("--overlap on one", "-N2", "srun -N2 $MEET & srun -N2 --overlap $MEET & wait", True),
        ("--exact -n2 in -n4", "-N2 -n4", "srun -N2 -n2 --exact $MEET & srun -N2 -n2 --exact $MEET & wait", True),
        # Without -n, srun makes as many tasks as the allocation has CPUs.
        ("--exact -c1 (no -n) in --exclusive", "-N2 --exclusive",
         "srun -N2 --exact -c1 $MEET & srun -N2 --exact -c1 $MEET & wait", False),
        ("--exact -n2 -c1 in --exclusive", "-N2 --exclusive",
         "srun -N2 -n2 --exact -c1 $MEET & srun -N2 -n2 --exact -c1 $MEET & wait", True),
    ]
    for i, (label, alloc, inner, expect) in enumerate(cases):
        d = os.path.join(work, "meet-%d" % i)
        os.makedirs(d)
        # Those expected to wait for each other are given less time.
        wait = 20 if expect else 5
        cmd = inner.replace("$MEET", "%s %s %s %g" % (PY, prog, d, wait))
        t0 = time.monotonic()
        r = slurm.run(["salloc"] + alloc.split() + ["bash", "-c", cmd], timeout=120)
        lines = [l for l in r.stdout.splitlines() if l]
        met = all(" met " in l for l in lines)
        busy = "step creation temporarily disabled" in r.stderr
        print("    salloc %s: %s -> %s in %.1fs%s: %s" % (
            alloc, label, "concurrent" if met else "one after the other", time.monotonic() - t0,
            " (srun: 'step creation temporarily disabled')" if busy else "", lines))
        if expect is not None:
            assert met == expect, (label, lines, r.stderr)


def _probe_files(d):
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name)) as f:
            out[name] = f.read().splitlines()
    return out


def _start_probe(slurm, work, name):
    d = os.path.join(work, name)
    os.makedirs(d)
    prog = os.path.join(work, "sigprobe.py")
    with open(prog, "w") as f:
        f.write(SIGPROBE)
    log = os.path.join(work, name + ".srun.out")
    srun = slurm.spawn(["srun", "-N2", "--ntasks-per-node=1", PY, prog, d], log=log)
    roles = ["h0-task", "h0-child", "h1-task", "h1-child"]
    harness.wait_for(lambda: all(any(l.startswith("ready") for l in _probe_files(d).get(r, []))
                                 for r in roles), 60, "the probe's four processes to be ready")
    ready = {r: dict(kv.split("=") for kv in _probe_files(d)[r][0].split()[1:]) for r in roles}
    return d, srun, log, ready


def _signals(lines, name=None):
    return [l for l in lines if l.startswith("sig ") and (name is None or l.split()[1] == name)]


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def check_usr1_and_cancel(slurm, work):
    d, srun, log, ready = _start_probe(slurm, work, "usr1")
    job = ready["h0-task"]["job"]
    for role, info in sorted(ready.items()):
        print("    %s: pid %s pgid %s sid %s (job %s step %s)" % (role, info["pid"], info["pgid"], info["sid"],
                                                               info["job"], info["step"]))
    slurm.signal(job, "USR1")
    # The tasks certainly get it; the children in their own process groups
    # only if Slurm signals every process of the step: give them as long.
    harness.wait_for(lambda: all(_signals(_probe_files(d)[r], "SIGUSR1") for r in ("h0-task", "h1-task")),
                     30, "the tasks to get SIGUSR1")
    try:
        harness.wait_for(lambda: all(_signals(_probe_files(d)[r], "SIGUSR1") for r in ("h0-child", "h1-child")),
                         10, "the children to get SIGUSR1")
    except AssertionError:
        pass
    print("    after scancel --signal=USR1 %s:" % job)
    usr1 = {r: _signals(lines, "SIGUSR1") for r, lines in _probe_files(d).items()}
    for r, lines in sorted(usr1.items()):
        print("      %s: %d x SIGUSR1 %s" % (r, len(lines), [" ".join(l.split()[2:4]) for l in lines]))
    # 6: scancel of the running step.
    t_cancel = time.time()
    slurm.cancel(job)
    gone = {}

    def all_gone():
        for r, info in ready.items():
            if r not in gone and not _alive(int(info["pid"])):
                gone[r] = time.time()
        return len(gone) == len(ready)
    try:
        harness.wait_for(all_gone, 3 * slurm.kill_wait + 20, "every probe process to end", interval=0.05)
    except AssertionError:
        pass
    srun.wait(timeout=30)
    print("    after scancel %s (KillWait=%ds), srun exit %s:" % (job, slurm.kill_wait, srun.returncode))
    files = _probe_files(d)
    for r in sorted(ready):
        sigs = _signals(files[r])
        seq = []
        for l in sigs:
            f = dict(kv.split("=") for kv in l.split()[2:])
            if float(f["t"]) >= t_cancel:
                seq.append("%s from %s (%s) at +%.2fs" % (l.split()[1], f["from"], f["comm"],
                                                         float(f["t"]) - t_cancel))
        end = ("ended at +%.2fs" % (gone[r] - t_cancel)) if r in gone else "STILL ALIVE"
        print("      %s: %s; %s" % (r, "; ".join(seq) or "no signal", end))
    with open(log, errors="replace") as f:
        print("    srun's output:", f.read().strip().replace("\n", " | "))
    still = [r for r in ready if r not in gone]
    for r in still:  # do not leave it to the cluster's close
        try:
            os.kill(int(ready[r]["pid"]), 9)
        except ProcessLookupError:
            pass
    # proctrack/linuxproc: every process of the step, once, from its slurmstepd.
    for r in ready:
        assert len(usr1[r]) == 1 and "comm=slurmstepd" in usr1[r][0], (r, usr1[r])
        term = [l for l in _signals(files[r], "SIGTERM") if "comm=slurmstepd" in l]
        assert len(term) == 1, (r, files[r])
    assert not still, "still alive after scancel: %s" % still


def check_requeue(slurm, work):
    counter = os.path.join(work, "requeue-counter")
    script = os.path.join(work, "requeue.sh")
    with open(script, "w") as f:
        f.write(REQUEUE_SCRIPT % counter)
    job = slurm.submit(["--requeue", "-N2", "--output=" + os.path.join(work, "requeue-%j.out"), script])

    def lines():
        try:
            with open(counter) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []
    harness.wait_for(lambda: len(lines()) >= 1, 60, "the batch job to start")
    slurm.wait_job_state(job, "RUNNING", 30)
    t0 = time.monotonic()
    slurm.requeue(job)
    pending = slurm.wait_job_state(job, "PENDING", 30)
    record = slurm.job(job)
    print("    after scontrol requeue: %s, Reason=%s, BeginTime=%s (cred_expire=%ds)"
          % (pending, record["Reason"], record.get("EligibleTime"), slurm.cred_expire))
    harness.wait_for(lambda: len(lines()) >= 2, slurm.cred_expire + 60, "the requeued job to run again")
    took = time.monotonic() - t0
    state = slurm.wait_job_state(job, "RUNNING", 30)
    print("    sbatch --requeue -> job %d; counter: %s" % (job, lines()))
    print("    ran again %.1fs after scontrol requeue; now %s, Restarts=%s"
          % (took, state, slurm.job_field(job, "Restarts")))
    assert lines()[0].startswith("job=%d restart=unset" % job), lines()
    assert lines()[1].startswith("job=%d restart=1" % job), lines()
    slurm.cancel(job)
    slurm.wait_job_state(job, "CANCELLED", 30)


def check_cycles(_slurm_unused, work):
    before = _slurm_processes()
    for cycle in range(2):
        with harness.Cluster(2, use_netns=True) as cluster:
            sub = os.path.join(work, "cycle-%d" % cycle)
            slurm = SlurmCluster(cluster, sub)
            with slurm:
                r = slurm.run(["srun", "-N2", "hostname"], timeout=60)
                assert sorted(r.stdout.split()) == ["h0", "h1"], r.stdout
                running = slurm.leftovers()
                # Keep one step running across close().
                slurm.spawn(["srun", "-N2", "sleep", "300"], log=os.path.join(sub, "sleep.out"))
                harness.wait_for(lambda: slurm.steps(slurm.jobs()[0]) if slurm.jobs() else None, 30,
                                 "the sleep step to run")
            left = slurm.leftovers()
            tmp_gone = not os.path.exists(slurm.tmp)
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
        ours = [l for l in ns.splitlines() if cluster.tag in l]
        print("    cycle %d: %d processes while up; after close: leftovers %s, namespaces %s, temp folder "
              "removed %s" % (cycle, len(running), left, ours, tmp_gone))
        assert not left and not ours and tmp_gone
    # Killed processes of the cluster's may stay zombies a moment, until
    # init reaps them (they were reparented when their slurmd died).
    try:
        harness.wait_for(lambda: _slurm_processes() == before, 10, "no Slurm process to be left")
    except AssertionError:
        pass
    after = _slurm_processes()
    print("    slurmctld/slurmd/slurmstepd/munged processes on the machine: before %s, after %s"
          % (before, after))
    assert after == before, (before, after)


def _slurm_processes():
    """Live (not zombie) processes named like Slurm's or munge's."""
    names = {"slurmctld", "slurmd", "slurmstepd", "munged", "srun", "salloc"}
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            if comm in names and stat.rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(d))
    return sorted(out)


CHECKS = [
    ("1 srun -N2 hostname", check_hostname),
    ("2 SLURM_* of a task", check_env),
    ("3 partial and concurrent steps", check_partial_and_concurrent_steps),
    ("4+6 scancel --signal=USR1, then scancel", check_usr1_and_cancel),
    ("5 sbatch --requeue + scontrol requeue", check_requeue),
]


def main():
    ok, why = available()
    if not ok:
        print("SKIP:", why)
        return 0
    results = []
    # The daemons' logs and the checks' files; CPPTORCHRUN_KEEP_WORK=1 keeps them.
    work = tempfile.mkdtemp(prefix="cpt-slurm-check-")
    try:
        with harness.Cluster(2, use_netns=True) as cluster:
            t0 = time.monotonic()
            with SlurmCluster(cluster, os.path.join(work, "cluster")) as slurm:
                print("cluster up in %.1fs: %s (config %s)"
                      % (time.monotonic() - t0, slurm.node_states(), slurm.conf))
                for name, check in CHECKS:
                    results.append(_run(name, check, slurm, os.path.join(work, "c%d" % len(results))))
                    if slurm.jobs():  # each check starts from an empty queue
                        print("    (jobs left by the check: %s)" % slurm.jobs())
                        slurm.run(["scancel", "--user=root"], timeout=15, check=False)
                        harness.wait_for(lambda: not slurm.jobs(), 30, "the queue to empty")
        results.append(_run("7 two start/stop cycles", check_cycles, None, os.path.join(work, "c7")))
    finally:
        if os.environ.get("CPPTORCHRUN_KEEP_WORK"):
            print("files kept in", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    for name, ok in results:
        print("%s  %s" % ("PASS" if ok else "FAIL", name))
    print("PASS" if all(ok for _, ok in results) else "FAIL")
    return 0 if all(ok for _, ok in results) else 1


def _run(name, check, slurm, work):
    os.makedirs(work, exist_ok=True)
    print("== %s" % name)
    t0 = time.monotonic()
    try:
        check(slurm, work)
        print("   PASS (%.1fs)" % (time.monotonic() - t0))
        return name, True
    except Exception:
        print("   FAIL (%.1fs)\n%s" % (time.monotonic() - t0, traceback.format_exc()[-6000:]))
        return name, False


if __name__ == "__main__":
    sys.exit(main())
