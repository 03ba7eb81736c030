"""The goodput benchmark: the share of wall time a two-node job keeps for
training under a fixed schedule of failures, with every launcher's default
failure handling (no --worker_timeout, no hang flags).

Each system runs the same job twice on two namespaced hosts (one worker
each, the rendezvous endpoint on the first host, as users type it): once
undisturbed, once under the schedule. goodput = undisturbed wall time /
disturbed wall time (1.0: the failures cost nothing).

  * cpptorchrun/train: cpptorchrun with the C++ `train`;
  * cpptorchrun/train_in_place: the same with --recovery in_place (the
    survivor keeps running and heals the new worker; checkpoints are still
    written, for whole-job failures);
  * cpptorchrun/python: cpptorchrun with bench/reference_ddp.py (Python
    DDP over Gloo, checkpointing and resuming as `train` does);
  * torchrun/python: Debian's torchrun with the same script.

The schedule, on the second host, GAP_S of training after the job's first
step and after each recovery (rank 0's first step after its resume):
  1. crash: kill -9 of its worker;
  2. hang: SIGSTOP of its worker, never continued (the launcher must find
     it and restart the group);
  3. lost node: every process of the host killed (kill -9), and the same
     command started again on it 2 s later, as a scheduler restarts a node;
  4. straggler: its worker throttled for STRAGGLE_S (stopped two thirds of
     every 150 ms, as a CPU quota does); nothing restarts, the job is slower.
A fault that is not recovered from within RECOVERY_CAP_S ends the run: it
is stopped, and its disturbed time is taken as the undisturbed time plus
RECOVERY_CAP_S, a lower bound (it cannot have trained more than its time so
far, and the rest comes after the cap), so its goodput is an upper bound,
said in the notes. Not in the schedule yet: a flapping node (it needs an elastic
job, --nnodes 1:2; tests/elastic_faults_test.py covers its quarantine).

In the runner as section "goodput" (it needs network namespaces, and torch
for the two Python systems).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from bench.recovery_bench import LogWatch, PY, RESUMED, ROOT, STEP
from tests import harness, jobs

# Under --recovery in_place rank 0 says where the new round's state came
# from instead of reading a checkpoint (worker/train_main.cc).
HEALED = re.compile(r"state of step \d+ from (rank \d+|checkpoint)|resumed from checkpoint at step \d+")
GAP_S = 8.0
STRAGGLE_S = 10.0
RECOVERY_CAP_S = 120.0
LOST_NODE_DOWN_S = 2.0
CHECKPOINT_EVERY = "50"
PORT = 29500
FAULTS = ("crash", "hang", "lost_node", "straggler")


class Job:
    """One system's job on hosts a and b: its two launchers, their logs, and
    how to find host b's worker."""

    def __init__(self, ctx, system, cluster, work, epochs):
        self.system, self.cluster, self.work = system, cluster, work
        self.a_host, self.b_host = cluster.hosts[1], cluster.hosts[2]
        # The first host's name, as users write it: torchrun serves the
        # endpoint where it matches the machine's hostname.
        endpoint = "%s:%d" % (self.a_host.name, PORT)
        ckpt = os.path.join(work, "ckpt")  # one folder, as a shared file system
        # Gloo finds its address from the hostname, which Debian's /etc/hosts
        # (and these hosts') maps to 127.0.1.1: Python DDP users name the
        # interface, under either launcher (`train` takes this node's address).
        self.env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHON_EXEC": PY, "GLOO_SOCKET_IFNAME": "eth0"}
        script = [os.path.join(ROOT, "bench", "reference_ddp.py"), "--epochs", str(epochs),
                  "--checkpoint_every", CHECKPOINT_EVERY, "--checkpoint_dir", ckpt]
        rdzv = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint,
                "--rdzv_id", "goodput", "--max_restarts", "20"]
        cpptorchrun = os.path.join(ctx.bin, "launcher", "cpptorchrun")
        if system in ("cpptorchrun/train", "cpptorchrun/train_in_place"):
            recovery = ["--recovery", "in_place"] if system.endswith("in_place") else []
            self.program = lambda logs: [cpptorchrun] + rdzv + recovery + ["--log_dir", logs, os.path.join(
                ctx.bin, "worker", "train"), "--epochs", str(epochs), "--checkpoint_every", CHECKPOINT_EVERY,
                "--checkpoint_dir", ckpt, "--progress", "lines"]
        elif system == "cpptorchrun/python":
            self.program = lambda logs: [cpptorchrun] + rdzv + ["--log_dir", logs] + script
        else:
            self.program = lambda logs: [PY, os.path.join(ROOT, "bench", "torchrun_ref.py")] + rdzv + script
        self.logs = []
        self.a = self._start(self.a_host, "a")
        self.b = self._start(self.b_host, "b")
        self.watch = LogWatch(self.logs)

    def _start(self, host, name):
        n = sum(1 for p in self.logs if os.path.basename(p).startswith(name))
        log = os.path.join(self.work, "%s%d.log" % (name, n))
        logs = os.path.join(self.work, "logs-%s%d" % (name, n))
        self.logs.append(log)
        if hasattr(self, "watch"):
            self.watch.paths.append(log)
        p = host.spawn(self.program(logs), log=log, env=self.env)
        p.log_dir = logs
        return p

    def running(self):
        return self.a.poll() is None or self.b.poll() is None

    def b_workers(self):
        if self.system.startswith("cpptorchrun"):
            return jobs.current_workers(jobs.events_in(self.b.log_dir), self.b.pid)
        return jobs.children(self.b.pid)

    def lose_b(self):
        """Kills every process of host b, then starts its launcher again."""
        ns = self.b_host.netns
        for _ in range(50):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            time.sleep(0.05)
        self.b.wait()
        time.sleep(LOST_NODE_DOWN_S)  # the node is down this long: part of the fault
        self.b = self._start(self.b_host, "b")

    def exit_codes(self):
        return self.a.returncode, self.b.returncode

    def close(self):
        self.watch.close()


def run_once(ctx, res, system, epochs, faults):
    """Wall seconds of one run and whether it was stopped (a fault not
    recovered from); figures of each fault's recovery on the way."""
    with harness.Cluster(3, use_netns=True) as cluster:
        os.environ["CPPTORCHRUN_BIN_DIR"] = ctx.bin
        work = tempfile.mkdtemp(prefix="cpt-bench-goodput-")
        job = None
        try:
            t0 = time.monotonic()
            job = Job(ctx, system, cluster, work, epochs)
            mark = job.watch.wait(STEP, t0, 600, "the first step (%s)" % system)
            for fault in faults:
                # GAP_S of training first (or the job's end).
                wait_until(lambda: not job.running(), mark + GAP_S)
                if not job.running():
                    res.note("goodput", "%s: the job ended before the %s; lengthen it" % (system, fault))
                    break
                victims = harness.wait_for(lambda: job.b_workers() or not job.running(), 60, "b's worker")
                at = time.monotonic()
                if fault == "crash":
                    os.kill(victims[0], signal.SIGKILL)
                elif fault == "hang":
                    os.kill(victims[0], signal.SIGSTOP)
                elif fault == "lost_node":
                    job.lose_b()
                elif fault == "straggler":
                    harness.throttle(victims[0], STRAGGLE_S)
                    res.add("goodput/%s/straggler/fault_s" % system, time.monotonic() - at, "s")
                    mark = time.monotonic()
                    continue
                try:
                    resumed = job.watch.wait(HEALED if system.endswith("in_place") else RESUMED, at,
                                             RECOVERY_CAP_S, "the resume after the %s" % fault)
                    mark = job.watch.wait(STEP, resumed - 1e-9, RECOVERY_CAP_S, "the first step after the resume")
                except RuntimeError:
                    res.note("goodput", "%s: no resume within %.0f s of the %s: run stopped, its goodput is "
                             "an upper bound" % (system, RECOVERY_CAP_S, fault))
                    return time.monotonic() - t0, True
                res.add("goodput/%s/%s/fault_to_first_step_s" % (system, fault), mark - at, "s")
            deadline = time.monotonic() + 1800
            while job.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            if job.running():
                raise RuntimeError("%s did not finish within 30 minutes" % system)
            wall = time.monotonic() - t0
            if job.exit_codes() != (0, 0):
                raise RuntimeError("%s exited %s; logs in %s" % (system, job.exit_codes(), work))
            return wall, False
        finally:
            if job is not None:
                job.close()
            cluster.close()
            shutil.rmtree(work, ignore_errors=True)


def wait_until(done, until):
    """Waits until the monotonic time `until`, or less when done() (polled
    every 50 ms: the fault's own timing, not a synchronisation)."""
    while time.monotonic() < until and not done():
        time.sleep(0.05)


def section_goodput(ctx, res):
    """For bench/bench.py: figures under goodput/."""
    ok, why = harness.netns_available()
    if not ok:
        res.note("goodput", "not measured: " + why)
        return
    torch_ok = os.path.exists(PY) and subprocess.run(
        [PY, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0
    systems = ["cpptorchrun/train", "cpptorchrun/train_in_place"] + (
        ["cpptorchrun/python", "torchrun/python"] if torch_ok else [])
    if not torch_ok:
        res.note("goodput", "the Python systems not measured: %s has no torch" % PY)
    epochs = 4 if ctx.quick else 8
    # Each system's undisturbed and disturbed runs back to back, the systems
    # in turn: a slow stretch of the machine falls on neighbouring runs, and
    # each pair's ratio is one sample. The full run repeats the C++ systems'
    # pairs (5 minutes each) 3 times; the Python pairs (10 minutes each) run
    # once: torchrun's disturbed run is stopped at the hang it never resumes
    # from, so the comparison of the two does not hinge on the noise.
    repeats = {s: 1 if ctx.quick or s.endswith("/python") else 3 for s in systems}
    for rep in range(max(repeats.values())):
        for system in [s for s in systems if rep < repeats[s]]:
            try:
                clean, _ = run_once(ctx, res, system, epochs, ())
                disturbed, stopped = run_once(ctx, res, system, epochs, FAULTS)
            except RuntimeError as e:
                res.failed("goodput", system, str(e))
                continue
            if stopped:
                # Not resumed within RECOVERY_CAP_S of a fault: whatever it had
                # trained by then (at most its time so far), the rest takes at
                # least the undisturbed time less that, after the cap.
                disturbed = max(disturbed, clean + RECOVERY_CAP_S)
            res.add("goodput/%s/undisturbed_s" % system, clean, "s")
            res.add("goodput/%s/disturbed_s" % system, disturbed, "s")
            res.add("goodput/%s/goodput" % system, clean / disturbed, "ratio", better="higher")
            if stopped:
                res.note("goodput", "%s: the run was stopped, its disturbed time is a lower bound (undisturbed + "
                         "%.0f s) and its goodput %.3f an upper bound" % (system, RECOVERY_CAP_S, clean / disturbed))
    kept = {s: res.stat("goodput/%s/goodput" % s) for s in systems}
    for s, st in kept.items():
        if st:
            ctx.ratios.setdefault("goodput", []).append(
                "%s keeps %.1f%% of its wall time for training under the schedule (median of %d; %.1f-%.1f%%)"
                % (s, 100 * st["median"], st["n"], 100 * st["min"], 100 * st["max"]))
    py, ref = kept.get("cpptorchrun/python"), kept.get("torchrun/python")
    if py and ref:
        ctx.ratios.setdefault("goodput", []).append(
            "the same Python script: cpptorchrun's goodput %.3f against torchrun's %.3f (%+.1f points)"
            % (py["median"], ref["median"], 100 * (py["median"] - ref["median"])))
    res.note("goodput", "two namespaced hosts x 1 worker, %d epochs, a checkpoint every %s steps; the "
                        "schedule on the second host, %.0f s of training before each fault: %s; every "
                        "launcher with its default failure handling; undisturbed and disturbed pairs, "
                        "interleaved, goodput per pair: %s" % (epochs, CHECKPOINT_EVERY, GAP_S, ", ".join(FAULTS),
                                                               ", ".join("%s x%d" % kv for kv in repeats.items())))
