"""The recovery benchmark: how long a job takes to train again after a
worker is killed, and how soon a lost node is noticed.

  * kill -9 of one worker -> rank 0 says "resumed from checkpoint", then
    -> rank 0 finishes its first step after the resume. A DDP step ends with
    an all-reduce of every rank's gradients, so rank 0's first step is every
    worker's first step. Worker start-up (exec, LibTorch, data), the
    re-rendezvous, the communicator's bootstrap and the checkpoint load are
    all inside the figure.
      - cpptorchrun, one node: 2 workers on fake GPUs, with the warm
        spares (the default) and without (--warm_spares false);
      - cpptorchrun, two namespaced nodes x 2 workers, a worker of node B
        killed (both nodes restart in a new round);
      - torchrun, one node: bench/reference_ddp.py (Python DDP, Gloo) with
        the same checkpoint cadence, the same --monitor_interval and
        --max_restarts;
      - the same Python DDP under cpptorchrun, --start_method spawn (each
        restarted worker execs python and imports torch) and forkserver
        (forked from the warm forkserver).
  * kill -9 of one worker under --recovery in_place (no checkpoint folder)
    -> every worker's next completed step (the launchers' `recovered`
    events), with its phases, on one node and on two namespaced nodes; the
    first kill without a warm spare (the node runs short until its spare is
    ready; the replacement's first step is timed too).
  * node loss: a node cut off the network (its veth down) -> the survivor's
    launcher records the round's end (round_ended in its event log).

Lines are timestamped as they reach the log file (a watcher polls every
5 ms), the same way for every launcher. In the runner as section "recovery".
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
from tests import harness, jobs  # the namespace cluster, the job's nodes

MONITOR_INTERVAL = "0.05"
CHECKPOINT_EVERY = "16"
RESUMED = re.compile(r"resumed from checkpoint at step \d+")
STEP = re.compile(r"(^|[\]:])(epoch \d+/\d+ )?step \d+")


class LogWatch:
    """Timestamps the lines of growing log files as they appear."""

    def __init__(self, paths, interval=0.005):
        self.paths = list(paths)
        self.lines = []  # (monotonic time, text)
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        offsets, partial = {}, {}
        while not self._stop.is_set():
            for p in list(self.paths):  # paths may be added while it runs
                offsets.setdefault(p, 0)
                partial.setdefault(p, b"")
                try:
                    with open(p, "rb") as f:
                        f.seek(offsets[p])
                        data = f.read()
                except FileNotFoundError:
                    continue
                if not data:
                    continue
                offsets[p] += len(data)
                now = time.monotonic()
                chunks = (partial[p] + data).split(b"\n")
                partial[p] = chunks.pop()
                with self._cond:
                    self.lines.extend((now, c.decode(errors="replace")) for c in chunks)
                    self._cond.notify_all()
            self._stop.wait(interval)

    def wait(self, pattern, after, timeout, what):
        """Time of the first line matching `pattern` seen after `after`."""
        def found():
            for t, text in self.lines:
                if t > after and pattern.search(text):
                    return t
            return None
        with self._cond:
            t = self._cond.wait_for(found, timeout=timeout)
        if t is None:
            raise RuntimeError("no %s within %.0f s" % (what, timeout))
        return t

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)


def spares_ready_in(events, nproc):
    """Whether a node's event log shows `nproc` ready spares not yet used."""
    ready = len(jobs.named(events, "spare_ready"))
    used = len(jobs.named(events, "warm_started", **{"from": "spare"}))
    lost = len(jobs.named(events, "spare_lost"))
    return ready - used - lost >= nproc


def kill_and_time(res, name, kills, alive, victims, checkpoint_token, watch, spares_ready=None):
    """`kills` times: waits for a new checkpoint, kills a victim with
    SIGKILL, and times the resume and the first step after it. Returns each
    kill's (kill, resumed, first step) in Unix seconds.

    spares_ready: for a job with warm spares, whether every node's spares
    are ready. Where the workers keep every CPU busy, a job has no spare
    until its first restart (launcher/agent/warm_pool.h), so that kill is
    timed apart (<name>/no_spare_yet/...), and each later kill waits for
    the restarted group's spares as for its checkpoint: `kills` kills with
    spares follow it."""
    wall = time.time() - time.monotonic()
    kills_at = []
    for k in range(kills + (1 if spares_ready else 0)):
        token = checkpoint_token()
        harness.wait_for(lambda: checkpoint_token() != token or not alive(), 300, "a new checkpoint")
        figure = name
        if spares_ready and k == 0 and not spares_ready():
            figure = name + "/no_spare_yet"
        elif spares_ready:
            harness.wait_for(lambda: spares_ready() or not alive(), 300, "the warm spares")
        pids = harness.wait_for(lambda: victims() or not alive(), 120, "workers to kill")
        if not alive():
            raise RuntimeError("%s: the job ended after %d kills; lengthen it" % (name, k))
        t0 = time.monotonic()
        os.kill(pids[-1], signal.SIGKILL)
        resumed = watch.wait(RESUMED, t0, 120, "resume after kill %d (%s)" % (k + 1, name))
        stepped = watch.wait(STEP, resumed - 1e-9, 120, "first step after kill %d (%s)" % (k + 1, name))
        res.add("recovery/%s/kill_to_resumed_ms" % figure, (resumed - t0) * 1e3, "ms")
        res.add("recovery/%s/kill_to_first_step_ms" % figure, (stepped - t0) * 1e3, "ms")
        res.add("recovery/%s/resumed_to_first_step_ms" % figure, (stepped - resumed) * 1e3, "ms")
        kills_at.append((t0 + wall, resumed + wall, stepped + wall))
    return kills_at


def add_launcher_phases(res, name, log_dir, kills_at):
    """For workers that send no start-up events (Python scripts): each
    restart's launcher part from its `restart` event (detection to the new
    workers started), the kill's detection before it, and the workers'
    part after it (started to the resume line)."""
    restarts = [e for e in jobs.named(jobs.events_in(log_dir), "restart") if e["cause"] == "worker_failed"]
    for (killed, resumed, _stepped), e in zip(kills_at, restarts):
        started = e["time"]
        detected = started - e["total_s"]
        res.add("recovery/%s/phase/kill_to_detected_ms" % name, (detected - killed) * 1e3, "ms")
        for phase in ("detected_to_stopped_s", "stopped_to_joined_s", "joined_to_started_s"):
            res.add("recovery/%s/phase/%s_ms" % (name, phase[:-2]), e[phase] * 1e3, "ms")
        res.add("recovery/%s/phase/started_to_resumed_ms" % name, (resumed - started) * 1e3, "ms")


RESTART_PHASES = ("detected_to_stopped_s", "stopped_to_joined_s", "joined_to_started_s",
                  "started_to_comm_ready_s", "comm_ready_to_restored_s", "restored_to_first_step_s", "total_s")


def add_restart_phases(res, name, log_dir):
    """Each restart's phases as the launcher measured them (its event log's
    restart_completed: from the failure's detection to every local worker's
    first step)."""
    for path in glob.glob(os.path.join(log_dir, "*", "events.jsonl")):
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                if e.get("event") != "restart_completed":
                    continue
                for phase in RESTART_PHASES:
                    res.add("recovery/%s/phase/%s_ms" % (name, phase[:-2]), e[phase] * 1e3, "ms")


def newest_checkpoint(ckpt):
    return lambda: (jobs.checkpoints(ckpt) or [None])[-1]


def file_mtime(path):
    def token():
        try:
            return os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return None
    return token


def spawn_logged(argv, log, env=None):
    out = open(log, "wb")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, **(env or {})), cwd=ROOT)
    out.close()
    return p


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def one_node(ctx, res, kills, warm=True):
    """`train` on one node; warm: with its warm spares (the default),
    else --warm_spares false (every restart execs afresh)."""
    name = "cpptorchrun/one_node" if warm else "cpptorchrun/one_node_cold"
    work = tempfile.mkdtemp(prefix="cpt-bench-recovery-")
    ckpt = os.path.join(work, "ckpt")
    log = os.path.join(work, "job.log")
    logs = os.path.join(work, "logs")
    argv = [os.path.join(ctx.bin, "launcher", "cpptorchrun"), "--standalone", "--nproc_per_node=2",
            "--fake_gpus=2", "--max_restarts=%d" % (kills + 3), "--monitor_interval=" + MONITOR_INTERVAL,
            "--warm_spares", "true" if warm else "false", "--log_dir", logs,
            os.path.join(ctx.bin, "worker", "train"), "--epochs", "3", "--checkpoint_every",
            CHECKPOINT_EVERY, "--checkpoint_dir", ckpt, "--progress", "lines"]
    p = spawn_logged(argv, log)
    watch = LogWatch([log])
    try:
        kill_and_time(res, name, kills, lambda: p.poll() is None,
                      lambda: jobs.current_workers(jobs.events_in(logs), p.pid), newest_checkpoint(ckpt), watch,
                      spares_ready=(lambda: spares_ready_in(jobs.events_in(logs), 2)) if warm else None)
        # Where a restarted worker's time went (rank 0's first line).
        for _t, text in watch.lines if warm else []:
            m = re.search(r"started in ([\d.]+) s \(before main ([\d.]+) s, data ([\d.]+) s, "
                          r"communicator ([\d.]+) s\)", text)
            if m:
                for key, v in zip(("total", "before_main", "data", "communicator"), m.groups()):
                    res.add("recovery/cpptorchrun/worker_start/%s_ms" % key, float(v) * 1e3, "ms")
        add_restart_phases(res, name, logs)
        warm_starts = len(jobs.named(jobs.events_in(logs), "warm_started"))
        res.note("recovery", "%s: %d of %d restarted workers came from a warm spare"
                 % (name, warm_starts, 2 * (kills + 1 if warm else kills)))
    finally:
        watch.close()
        stop(p)
        shutil.rmtree(work, ignore_errors=True)


def whole_and_recovered(events, nproc):
    """A node's last round has all `nproc` workers and every round since
    the first has its `recovered` event (every worker made a step in it)."""
    started = jobs.named(events, "workers_started")
    return (bool(started) and len(started[-1]["pids"]) == nproc and
            len(jobs.named(events, "recovered")) == len(started) - 1)


def in_place_kills(res, name, kills, nodes, victim_node, alive, log_tail):
    """`kills` + 1 kills of local rank 1 on `victim_node` under --recovery
    in_place, timed to every node's next completed step: each node's first
    `recovered` event after the kill (its time is when the last of its
    workers' first step of the new round reached the launcher; the kill is
    timed here, on the same wall clock). `nodes`: each node's events().

    The first kill finds no warm spare (on 2 busy CPUs spares start only
    after a job's first restart): <name>/no_spare_yet. The node then runs
    short (the survivors go on at the smaller world) until the spare is
    ready, and grows back at a step boundary: the replacement's first step
    is timed from its spare's ready (replacement_ready_to_first_step) and
    from the kill. Each later kill waits for the spares and for every node
    to be whole."""
    events = nodes[victim_node]
    for k in range(kills + 1):
        harness.wait_for(lambda: all(whole_and_recovered(n(), 2) for n in nodes) or not alive(), 300,
                         "every node whole after recovery %d" % k)
        if k == 0:
            # Training, and every worker has said it can recover in place
            # (a worker killed before that restarts the group whole).
            harness.wait_for(lambda: re.search(r"step [1-9]\d\d+/", log_tail()) or not alive(), 300,
                             "100 steps")
        else:
            harness.wait_for(lambda: spares_ready_in(events(), 2) or not alive(), 300, "the warm spares")
        if not alive():
            raise RuntimeError("%s: the job ended after %d kills:\n%s\n%s" % (name, k, log_tail(),
                                                                               [n() for n in nodes]))
        figure = name + "/no_spare_yet" if k == 0 else name
        victim = jobs.named(events(), "workers_started")[-1]["pids"][1]
        killed = time.time()
        os.kill(victim, signal.SIGKILL)

        def after_kill(n):
            return [e for e in jobs.named(n(), "recovered") if e["time"] > killed][:1]
        done = harness.wait_for(lambda: (all(after_kill(n) for n in nodes) and [after_kill(n)[0] for n in nodes])
                                or (not alive() and "ended"), 120, "recovery after kill %d (%s)" % (k + 1, name))
        if done == "ended":
            raise RuntimeError("%s: the job ended during kill %d:\n%s" % (name, k + 1, log_tail()))
        res.add("recovery/%s/kill_to_next_step_ms" % figure, (max(e["time"] for e in done) - killed) * 1e3, "ms")
        own = done[victim_node]
        for phase in ("detected_to_aborted_s", "aborted_to_round_formed_s", "round_formed_to_started_s",
                      "started_to_comm_ready_s", "comm_ready_to_state_received_s",
                      "state_received_to_next_step_s", "total_s"):
            res.add("recovery/%s/phase/%s_ms" % (figure, phase[:-2]), own[phase] * 1e3, "ms")
        held = [e for e in jobs.named(events(), "survivors_held") if e["time"] > killed][:1]
        if held and held[0]["vacant"]:
            # Short: the replacement joins when its spare is ready.
            harness.wait_for(lambda: whole_and_recovered(events(), 2) or not alive(), 300, "the node grown back")
            ev = events()
            grown = [e for e in jobs.named(ev, "recovered") if e["time"] > own["time"]][0]
            ready = [e for e in jobs.named(ev, "spare_ready") if e["time"] <= grown["time"]][-1]
            spare = [e for e in jobs.named(ev, "spare_started", local_rank=ready["local_rank"])
                     if e["time"] <= ready["time"]][-1]
            res.add("recovery/%s/replacement_ready_to_first_step_ms" % figure,
                    (grown["time"] - ready["time"]) * 1e3, "ms")
            res.add("recovery/%s/replacement_startup_ms" % figure, (ready["time"] - spare["time"]) * 1e3, "ms")
            res.add("recovery/%s/kill_to_replacement_first_step_ms" % figure, (grown["time"] - killed) * 1e3, "ms")
    for i, n in enumerate(nodes):
        ev = n()
        kept = {e["pids"][0] for e in jobs.named(ev, "workers_started")}
        res.note("recovery", "%s, node %d: %d kills, every recovery in place: %s; local rank 0 kept one process "
                             "throughout: %s; rounds run short: %d"
                 % (name, i, kills + 1, all(r["path"] == "in_place" for r in jobs.named(ev, "recovered")),
                    len(kept) == 1, sum(1 for e in jobs.named(ev, "survivors_held") if e["vacant"])))


def in_place_one_node(ctx, res, kills):
    """`train` on one node (2 workers on fake GPUs) with --recovery
    in_place and no checkpoint folder (in_place_kills)."""
    name = "cpptorchrun/in_place_one_node"
    work = tempfile.mkdtemp(prefix="cpt-bench-inplace-")
    log = os.path.join(work, "job.log")
    logs = os.path.join(work, "logs")
    argv = [os.path.join(ctx.bin, "launcher", "cpptorchrun"), "--standalone", "--nproc_per_node=2",
            "--fake_gpus=2", "--max_restarts=%d" % (kills + 3), "--monitor_interval=" + MONITOR_INTERVAL,
            "--recovery", "in_place", "--log_dir", logs,
            os.path.join(ctx.bin, "worker", "train"), "--epochs", "10", "--progress", "lines"]
    p = spawn_logged(argv, log)

    def tail():
        with open(log, errors="replace") as f:
            return f.read()[-3000:]
    try:
        in_place_kills(res, name, kills, [lambda: jobs.events_in(logs)], 0, lambda: p.poll() is None, tail)
    finally:
        stop(p)
        shutil.rmtree(work, ignore_errors=True)


def in_place_two_nodes(ctx, res, kills):
    """The same on two namespaced nodes x 2 workers (the rendezvous server
    on a third host), local rank 1 of node b killed: both nodes' survivors
    stay, and every node's next step is timed."""
    name = "cpptorchrun/in_place_two_nodes"
    with harness.Cluster(3, use_netns=True) as cluster:
        os.environ["CPPTORCHRUN_BIN_DIR"] = ctx.bin
        work = tempfile.mkdtemp(prefix="cpt-bench-inplace-2n-")
        try:
            server = jobs.RdzvServer(cluster.hosts[0], work)
            conf = jobs.fast_rdzv_conf(0.5, 4, last_call=0.2) + [
                "--monitor_interval", MONITOR_INTERVAL, "--recovery", "in_place"]
            program = [os.path.join(ctx.bin, "worker", "train"), "--epochs", "10", "--progress", "lines"]
            a, b = [jobs.Node(cluster.hosts[i], work, n, server.endpoint, "2:2", max_restarts=kills + 3,
                              launcher_args=conf, program=program)
                    for i, n in ((1, "a"), (2, "b"))]
            in_place_kills(res, name, kills, [a.events_so_far, b.events_so_far], 1,
                           lambda: a.proc.poll() is None and b.proc.poll() is None,
                           lambda: a.text()[-2000:] + b.text()[-2000:])
        finally:
            shutil.rmtree(work, ignore_errors=True)


def torchrun_one_node(ctx, res, kills):
    work = tempfile.mkdtemp(prefix="cpt-bench-recovery-ref-")
    ckpt = os.path.join(work, "ckpt")
    log = os.path.join(work, "job.log")
    argv = [PY, os.path.join(ROOT, "bench", "torchrun_ref.py"), "--standalone", "--nproc_per_node=2",
            "--max_restarts=%d" % (kills + 2), "--monitor_interval=" + MONITOR_INTERVAL,
            os.path.join(ROOT, "bench", "reference_ddp.py"), "--epochs", "3",
            "--checkpoint_every", CHECKPOINT_EVERY, "--checkpoint_dir", ckpt]
    p = spawn_logged(argv, log, env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    watch = LogWatch([log])
    try:
        kill_and_time(res, "torchrun/one_node", kills, lambda: p.poll() is None,
                      lambda: jobs.children(p.pid), file_mtime(os.path.join(ckpt, "checkpoint.pt")), watch)
    finally:
        watch.close()
        stop(p)
        shutil.rmtree(work, ignore_errors=True)


def python_one_node(ctx, res, kills, start_method):
    """bench/reference_ddp.py (the same Python DDP as under torchrun) under
    cpptorchrun, its workers spawned or forked from the forkserver."""
    name = "cpptorchrun_python_%s/one_node" % start_method
    work = tempfile.mkdtemp(prefix="cpt-bench-recovery-py-")
    ckpt = os.path.join(work, "ckpt")
    log = os.path.join(work, "job.log")
    logs = os.path.join(work, "logs")
    argv = [os.path.join(ctx.bin, "launcher", "cpptorchrun"), "--standalone", "--nproc_per_node=2",
            "--max_restarts=%d" % (kills + 2), "--monitor_interval=" + MONITOR_INTERVAL,
            "--start_method", start_method, "--log_dir", logs,
            os.path.join(ROOT, "bench", "reference_ddp.py"), "--epochs", "3",
            "--checkpoint_every", CHECKPOINT_EVERY, "--checkpoint_dir", ckpt]
    p = spawn_logged(argv, log, env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHON_EXEC": PY})
    watch = LogWatch([log])
    try:
        kills_at = kill_and_time(res, name, kills, lambda: p.poll() is None,
                                 lambda: jobs.current_workers(jobs.events_in(logs), p.pid),
                                 file_mtime(os.path.join(ckpt, "checkpoint.pt")), watch)
        add_launcher_phases(res, name, logs, kills_at)
    finally:
        watch.close()
        stop(p)
        shutil.rmtree(work, ignore_errors=True)


def two_nodes(ctx, res, kills, backend="c10d"):
    """`backend` etcd: the rendezvous on a 3-member etcd cluster on the
    first host instead of rendezvous_server (figures under two_nodes_etcd)."""
    name = "two_nodes" if backend == "c10d" else "two_nodes_" + backend
    with harness.Cluster(3, use_netns=True) as cluster:
        os.environ["CPPTORCHRUN_BIN_DIR"] = ctx.bin
        work = tempfile.mkdtemp(prefix="cpt-bench-recovery-2n-")
        try:
            server = (jobs.EtcdRendezvous(cluster.hosts[0], work) if backend == "etcd"
                      else jobs.RdzvServer(cluster.hosts[0], work))
            conf = jobs.fast_rdzv_conf(0.5, 4, last_call=0.2) + ["--monitor_interval", MONITOR_INTERVAL]
            train = ["--epochs", "3", "--checkpoint_every", CHECKPOINT_EVERY, "--progress", "lines"]
            a, b = [jobs.Node(cluster.hosts[i], work, n, server.endpoint, "2:2", max_restarts=kills + 3,
                              launcher_args=conf, train_args=train, backend=backend)
                    for i, n in ((1, "a"), (2, "b"))]
            watch = LogWatch([a.log, b.log])
            try:
                kill_and_time(res, "cpptorchrun/" + name, kills,
                              lambda: a.proc.poll() is None and b.proc.poll() is None,
                              b.worker_pids, newest_checkpoint(os.path.join(work, "ckpt")), watch,
                              spares_ready=lambda: all(spares_ready_in(n.events_so_far(), 2) for n in (a, b)))
                # The killed node's restarts, phase by phase (its event log).
                for e in jobs.named(b.events_so_far(), "restart_completed"):
                    for phase in RESTART_PHASES:
                        res.add("recovery/cpptorchrun/%s/phase/%s_ms" % (name, phase[:-2]), e[phase] * 1e3, "ms")
            finally:
                watch.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)


def node_loss(ctx, res, repeat):
    keep_alive, attempts = 0.5, 2
    for _ in range(repeat):
        with harness.Cluster(3, use_netns=True) as cluster:
            os.environ["CPPTORCHRUN_BIN_DIR"] = ctx.bin
            work = tempfile.mkdtemp(prefix="cpt-bench-loss-")
            try:
                server = jobs.RdzvServer(cluster.hosts[0], work)
                conf = jobs.fast_rdzv_conf(keep_alive, attempts, last_call=1.0)
                train = ["--epochs", "3", "--checkpoint_every", "16", "--progress", "none"]
                a = jobs.Node(cluster.hosts[1], work, "a", server.endpoint, "1:2", launcher_args=conf,
                              train_args=train)
                jobs.Node(cluster.hosts[2], work, "b", server.endpoint, "1:2", launcher_args=conf,
                          train_args=train)
                harness.wait_for(lambda: a.joined(world_size=4), 120, "the 2-node round")
                cluster.hosts[2].cut()
                cut_at = time.time()
                ended = harness.wait_for(
                    lambda: [e for e in jobs.named(a.events_so_far(), "round_ended", round=1)
                             if e["time"] >= cut_at - 1], 60, "node A to learn of the loss")
                res.add("recovery/node_loss/detect_ms", (ended[0]["time"] - cut_at) * 1e3, "ms")
            finally:
                shutil.rmtree(work, ignore_errors=True)
    res.note("recovery", "node loss: keep_alive_interval %.1f s x keep_alive_max_attempt %d = %.1f s "
                         "deadline; goal: detected within deadline + 0.5 s"
             % (keep_alive, attempts, keep_alive * attempts))


def section_recovery(ctx, res):
    """For bench/bench.py: figures under recovery/."""
    kills = 3 if ctx.quick else 8
    torch_ok = os.path.exists(PY) and subprocess.run(
        [PY, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0
    one_node(ctx, res, kills)
    one_node(ctx, res, kills, warm=False)
    in_place_one_node(ctx, res, kills)
    if torch_ok:
        torchrun_one_node(ctx, res, kills)
        python_one_node(ctx, res, kills, "spawn")
        python_one_node(ctx, res, kills, "forkserver")
    else:
        res.note("recovery", "torchrun not measured: %s has no torch" % PY)
    ok, why = harness.netns_available()
    if not ok:
        res.note("recovery", "two-node recovery and node-loss detection not measured: " + why)
        return
    two_nodes(ctx, res, kills)
    two_nodes(ctx, res, kills, backend="etcd")
    in_place_two_nodes(ctx, res, kills)
    node_loss(ctx, res, 2 if ctx.quick else 5)
    res.note("recovery", "kill -9 of one worker, --monitor_interval %s on both launchers, a "
                         "checkpoint every %s steps; first step: rank 0's first step after the resume "
                         "(it ends with every rank's all-reduce)" % (MONITOR_INTERVAL, CHECKPOINT_EVERY))
