"""Building blocks for end-to-end job scenarios: a rendezvous server on a
host, a cpptorchrun node on a host, and the checks every scenario shares
(metrics, restarts, processes left behind)."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from tests import harness

LAUNCHER = "launcher/cpptorchrun"
SERVER = "rendezvous/rendezvous_server"
TRAIN = "worker/train"
ETCD_CLUSTER = "rendezvous/etcd/etcd_cluster_main"

# The backend the elastic scenarios run on: the gRPC rendezvous service
# (c10d, as before) or a 3-member etcd cluster (etcd); the Bazel target of a
# scenario picks it (tests/BUILD.bazel, the *_etcd targets).
BACKEND = os.environ.get("CPPTORCHRUN_TEST_RDZV_BACKEND", "c10d")


class RdzvServer:
    """rendezvous_server on `host`, on a port it picks (or a given one)."""

    def __init__(self, host, log_dir, port=0, extra=(), wrapper=()):
        self.host = host
        self.log = os.path.join(log_dir, "rdzv-%s-%d.log" % (host.name, int(time.monotonic() * 1e3)))
        self.proc = host.spawn(list(wrapper) + [harness.binary(SERVER), "--host", host.addr, "--port", str(port)]
                               + list(extra), log=self.log)
        line = harness.wait_for(lambda: self._listening(), 30, "rendezvous_server to listen")
        self.port = int(line)
        self.endpoint = "%s:%d" % (host.addr, self.port)

    def _listening(self):
        if self.proc.poll() is not None:
            raise AssertionError("rendezvous_server exited %s:\n%s" % (self.proc.returncode, self.text()))
        m = re.search(r"listening on \S+:(\d+)", self.text())
        return m.group(1) if m else None

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


class EtcdRendezvous:
    """A real etcd cluster of `members` on `host` (rendezvous/etcd/
    etcd_cluster_main, one process a member, each its own data folder), for
    --rdzv_backend etcd: `endpoint` is the member list. Members can be killed
    (kill -9) and restarted, and the leader asked for. Stopped with the
    cluster (end of the helper's stdin stops every member)."""

    def __init__(self, host, log_dir, members=3):
        self.host = host
        self.members = members
        tag = "%s-%d" % (host.name, int(time.monotonic() * 1e3))
        self.dir = os.path.join(log_dir, "etcd-" + tag)
        os.makedirs(self.dir)
        self.log = os.path.join(log_dir, "etcd-%s.log" % tag)
        err = open(self.log, "wb")
        self.proc = subprocess.Popen(host.argv([harness.binary(ETCD_CLUSTER), "--members", str(members),
                                                "--dir", self.dir, "--host", host.addr]),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                     start_new_session=True, text=True, bufsize=1)
        err.close()
        host.cluster.procs.append(self.proc)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("endpoints "):
            raise AssertionError("etcd cluster did not start: %r\n%s" % (line, self.text()))
        self.endpoint = line.split(" ", 1)[1]
        self.backend = "etcd"

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def command(self, line):
        """One command (kill I, restart I, leader) and its answer's words
        after "ok"; an "error" answer raises."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer.startswith("ok"):
            raise AssertionError("etcd cluster: %s: %r" % (line, answer))
        return answer[2:].strip()

    def kill(self, i):
        self.command("kill %d" % i)

    def restart(self, i):
        self.command("restart %d" % i)

    def leader(self):
        return int(harness.wait_for(lambda: self._leader(), 30, "an etcd leader"))

    def _leader(self):
        try:
            return self.command("leader")
        except AssertionError:
            return None


def Rendezvous(host, log_dir):
    """The scenario's rendezvous on `host`, per BACKEND: a rendezvous_server,
    or a 3-member etcd cluster; either has `endpoint` and `backend`."""
    if BACKEND == "etcd":
        return EtcdRendezvous(host, log_dir)
    server = RdzvServer(host, log_dir)
    server.backend = "c10d"
    return server


class Node:
    """One cpptorchrun (one node) running `train` on fake GPUs (CPU slots
    with fake_gpus=False), or, given `program`, that command line instead."""

    def __init__(self, host, work, name, endpoint, nnodes, nproc=2, run_id="job",
                 max_restarts=3, launcher_args=(), train_args=(), env=None, program=None,
                 fake_gpus=True, backend=None):
        self.host = host
        self.name = name
        self.work = work
        self.log = os.path.join(work, name + ".log")
        self.metrics = os.path.join(work, name + "-metrics.json")
        argv = [harness.binary(LAUNCHER),
                "--nnodes", nnodes, "--nproc_per_node", str(nproc)] + (
                ["--fake_gpus", str(nproc)] if fake_gpus else []) + [
                "--rdzv_backend", backend or BACKEND, "--rdzv_endpoint", endpoint, "--rdzv_id", run_id,
                "--max_restarts", str(max_restarts),
                # One log folder for every node of the scenario, as a shared
                # filesystem on a cluster: each launcher makes its own in it.
                "--log_dir", os.path.join(work, "logs"), "--tee", "3",
                "--monitor_interval", "0.1"] + list(launcher_args) + (list(program) if program else [
                harness.binary(TRAIN), "--checkpoint_dir", os.path.join(work, "ckpt"),
                "--metrics_json", self.metrics] + list(train_args))
        self.proc = host.spawn(argv, log=self.log, env=env)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not finish within %ds; its log:\n%s"
                                 % (self.name, timeout, self.text()[-6000:]))

    def worker_pids(self):
        """Pids of this node's current workers: those of its last
        workers_started event still alive as the launcher's children (its
        warm spares and forkserver are children too, not workers)."""
        return current_workers(self.events_so_far(), self.proc.pid)

    def log_folder(self):
        """The launcher's own folder in --log_dir, once it has named it (else None)."""
        m = re.search(r"worker logs: (\S+)", self.text())
        return m.group(1) if m else None

    def events(self):
        """This launcher's event log (launcher/agent/event_log.h), from the log
        folder it named: a list of dicts, in order."""
        folder = self.log_folder()
        if not folder:
            raise AssertionError("%s named no log folder:\n%s" % (self.name, self.text()[-3000:]))
        with open(os.path.join(folder, "events.jsonl")) as f:
            # Whole lines: a running launcher may be writing one (each event
            # is one write that ends in a newline).
            return [json.loads(line) for line in f if line.endswith("\n")]

    def events_so_far(self):
        """events() of a launcher that may still be starting: none before
        it has named its log folder and recorded a first event."""
        try:
            return self.events() if self.log_folder() else []
        except FileNotFoundError:
            return []

    def joined(self, **fields):
        """This launcher's round_joined events so far with the given field
        values, e.g. joined(world_size=4): the rounds it was placed in."""
        return named(self.events_so_far(), "round_joined", **fields)


def current_workers(events, launcher_pid):
    """The pids of the last workers_started event in `events` that are still
    children of `launcher_pid`."""
    started = named(events, "workers_started")
    if not started:
        return []
    live = set(children(launcher_pid))
    return [p for p in started[-1]["pids"] if p in live]


def events_in(folder, run_id=None):
    """The whole lines of the event logs under `folder` (each launcher's
    <log_dir>/<run>_<suffix>/events.jsonl; only run `run_id`'s when given),
    as dicts, file by file."""
    out = []
    launchers = "*" if run_id is None else glob.escape(run_id) + "_*"
    for path in sorted(glob.glob(os.path.join(folder, launchers, "events.jsonl"))):
        with open(path) as f:
            out += [json.loads(line) for line in f if line.endswith("\n")]
    return out


def named(events, name, **fields):
    """The events called `name` whose fields have the given values."""
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in fields.items())]


def left_round(events, round_number):
    """(time, restart event) of when a node gave up its part in round
    `round_number` to restart, or None if it never did: when the rendezvous
    ended the round, the moment the node saw that; when its own worker group
    failed, the moment its workers had stopped. Both from the phases of the
    restart event (its time is when the next round's workers started)."""
    for e in named(events, "restart", from_round=round_number):
        at = e["time"] - e["total_s"]
        if e["cause"] == "worker_failed":
            at += e["detected_to_stopped_s"]
        return at, e
    return None


def node_log_folders(work, run_id):
    """The launchers' folders in the scenario's shared --log_dir:
    {folder: {attempt: [local ranks with a stdout.log]}}."""
    logs = os.path.join(work, "logs")
    out = {}
    for d in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        if not d.startswith(run_id + "_"):
            continue
        attempts = {}
        for a in sorted(os.listdir(os.path.join(logs, d))):
            if a.startswith("attempt_"):
                ranks = sorted(int(r) for r in os.listdir(os.path.join(logs, d, a)) if r.isdigit() and
                               os.path.exists(os.path.join(logs, d, a, r, "stdout.log")))
                attempts[int(a[len("attempt_"):])] = ranks
        out[d] = attempts
    return out


def work_dir(owner, prefix):
    """A fresh folder for a scenario's files, removed at `owner`'s cleanup
    (a TestCase, or its class when called from setUpClass), after its
    tearDown has stopped the processes; CPPTORCHRUN_KEEP_WORK=1 keeps it."""
    path = tempfile.mkdtemp(prefix=prefix)
    if not os.environ.get("CPPTORCHRUN_KEEP_WORK"):
        cleanup = owner.addClassCleanup if isinstance(owner, type) else owner.addCleanup
        cleanup(shutil.rmtree, path, True)
    return path


def children(pid):
    """Pids of the children of `pid` (none once it is gone)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def checkpoints(ckpt_dir):
    """Completed checkpoint files in ckpt_dir (not the temporary files that
    the worker renames into place)."""
    try:
        return sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".bin"))
    except FileNotFoundError:
        return []


def wait_checkpoint(ckpt_dir, timeout=300):
    """Waits until a completed checkpoint exists."""
    return harness.wait_for(lambda: checkpoints(ckpt_dir), timeout,
                            "a completed checkpoint in " + ckpt_dir)


def read_metrics(path):
    with open(path) as f:
        return json.load(f)


def job_leftovers(run_id):
    """Live processes that belong to run `run_id` (workers carry it in env)."""
    return harness.processes_with_env("TORCHELASTIC_RUN_ID", run_id)


def status_json(host, endpoint, run_id):
    """`cpptorchrun status --json` of `run_id`, run on `host`, as a dict;
    None when it fails (the service does not answer or know the run)."""
    r = subprocess.run(host.argv([harness.binary(LAUNCHER), "status", "--json", "--rdzv_endpoint", endpoint,
                                  "--rdzv_id", run_id]), capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout) if r.returncode == 0 else None


def node_fault(status, kind):
    """The first node's faults[kind] ("last_hang", "last_straggler") in a
    status_json answer, or None."""
    for node in (status or {}).get("nodes", []):
        if node["faults"][kind]:
            return node["faults"][kind]
    return None


def fast_rdzv_conf(keep_alive=0.5, attempts=2, last_call=1.0, join_timeout=60):
    return ["--rdzv_conf", "keep_alive_interval=%g,keep_alive_max_attempt=%d,last_call_timeout=%g,"
            "join_timeout=%g" % (keep_alive, attempts, last_call, join_timeout)]


def read_sample_logs(folder):
    """train --sample_log's files: {round: {"world": W, "resumed": set of
    steps, "lines": [(global step, epoch, [indices])]}} (worker/training/sample_log.h)."""
    rounds = {}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("samples."):
            continue
        with open(os.path.join(folder, name)) as f:
            header = f.readline().split()
            if header[:2] != ["#", "round"] or len(header) != 7:
                raise AssertionError("%s: bad header %r" % (name, header))
            entry = rounds.setdefault(int(header[2]), {"world": int(header[6]), "resumed": set(),
                                                       "lines": []})
            for line in f:
                if line.startswith("# resumed "):
                    entry["resumed"].add(int(line.split()[2]))
                    continue
                fields = [int(x) for x in line.split()]
                entry["lines"].append((fields[0], fields[1], fields[2:]))
    return rounds


def epoch_coverage(folder, epoch):
    """What the job as a whole trained on in `epoch`, counting only the work
    that was kept: a round's batches up to the step the next round resumed
    from (later ones were lost with the round and redone). Returns
    (collections.Counter of sample index -> times trained, [(round, world,
    resumed step, batches kept)] of the rounds that trained)."""
    import collections
    rounds = read_sample_logs(folder)
    trained = sorted(r for r, e in rounds.items() if e["lines"])
    counts = collections.Counter()
    kept = []
    for i, r in enumerate(trained):
        e = rounds[r]
        if len(e["resumed"]) > 1:
            raise AssertionError("round %d: ranks resumed from different steps %s" % (r, e["resumed"]))
        start = min(e["resumed"]) if e["resumed"] else 0
        end = min(rounds[trained[i + 1]]["resumed"] or {0}) if i + 1 < len(trained) else float("inf")
        batches = 0
        for step, ep, indices in e["lines"]:
            if step <= start:
                raise AssertionError("round %d logged step %d, at or before its resume point %d"
                                     % (r, step, start))
            if step <= end and ep == epoch:
                counts.update(indices)
                batches += 1
        kept.append((r, e["world"], start, batches))
    return counts, kept
