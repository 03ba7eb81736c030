"""A real Slurm cluster (Debian's slurm-wlm 22.05) on namespaced hosts, for
scenarios that run cpptorchrun the way a site runs it: under srun/sbatch.

`SlurmCluster(cluster, work)` takes a `harness.Cluster` of two or more hosts in
network namespaces (h0, h1, ..., 198.18.0.1, .2, ...) and, on `start()`, runs
  * its own munged (its own key, socket, pid and seed files; the key is made
    with mungekey), in h0's namespace: munge's socket is a file, and a unix
    socket on the filesystem is reachable from every network namespace, so
    each host's daemons and clients use the same one, as the hosts of a real
    cluster use each their own munged with one shared key;
  * slurmctld on h0 (SlurmctldHost=h0(198.18.0.1));
  * slurmd on every host, in its namespace and with its hostname (-N name).
Every daemon runs in the foreground (-D) as a child of the test, spawned with
`Host.spawn` (so `Cluster.close` kills it too), its output in a log file in
`work`; the configuration (slurm.conf, cgroup.conf), the controller's state
and each node's spool live in a temporary folder of their own. The ports are
picked at random, and the daemons are told the configuration file and munge
socket explicitly: nothing here uses or disturbs a system Slurm or munge
(/etc/slurm, /run/munge), whether or not the packages' services run.

Clients (srun, sbatch, salloc, scontrol, scancel, squeue, sinfo) run on h0
(or another host of the cluster), in its namespace and with its hostname,
where the controller's address is reachable: `client_argv(argv)` wraps a
command line so, `run(argv)` runs one to completion (bounded), `spawn(argv,
log)` starts one in the background; `wait_job_state`, `job_field`, `requeue`,
`signal` and `cancel` wrap scontrol and scancel for a job. The
namespaced hosts share the real filesystem, so `work` is the "shared storage"
of the cluster, as on a real one.

Every process of the cluster (daemons, slurmstepd, clients and the jobs'
tasks, which inherit the clients' environment) carries CPT_SLURM_CLUSTER=<tag>
in its environment; `close()` cancels the jobs, stops the daemons (SIGTERM,
then SIGKILL), kills whatever still carries the tag, and removes the temporary
folder; `leftovers()` names any process of the cluster still alive.

Processes started here are bounded: every wait has a timeout, and nothing is
synchronised with sleeps (`harness.wait_for` polls conditions).
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from tests import harness

# The binaries a cluster needs (Debian: slurmctld, slurmd, slurm-client, munge).
DAEMONS = ["slurmctld", "slurmd", "munged", "mungekey"]
CLIENTS = ["srun", "sbatch", "salloc", "scontrol", "scancel", "squeue", "sinfo"]
SBIN = ["/usr/sbin", "/sbin"]

# The environment variable that marks every process of one cluster.
TAG_VAR = "CPT_SLURM_CLUSTER"

# Job states after which a job runs no more (scontrol's names; a requeued
# job passes through REQUEUED and COMPLETING back to PENDING).
FINISHED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY"}


def _which(name):
    """Path of `name` on $PATH or in the sbin folders (not always on root's
    PATH in containers), else None."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def available():
    """(True, '') when a Slurm cluster can be started here, else (False, why)."""
    missing = [b for b in DAEMONS + CLIENTS if not _which(b)]
    if missing:
        return False, ("Slurm/munge binaries not installed (%s); tools/bootstrap installs "
                       "slurmctld slurmd slurm-client munge" % " ".join(missing))
    return harness.netns_available()


def _tail(path, limit=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-limit:]
    except FileNotFoundError:
        return "(no log)"


def parse_record(line):
    """One `scontrol show ... -o` line as a dict of its Key=Value fields (a
    value may hold spaces: it runs up to the next ' Key=')."""
    fields = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][\w/:.]*)=(.*?)(?=\s[A-Za-z][\w/:.]*=|\s*$)", line.strip()):
        fields.setdefault(m.group(1), m.group(2))
    return fields


class SlurmCluster:
    """slurmctld + one slurmd per host of `cluster` + a munged, as described
    in the module docstring. `with SlurmCluster(cluster, work) as slurm:` starts
    it (waits until every node is idle) and stops it again.

    cpus: the CPUs each node offers (forced, whatever the machine has).
    kill_wait: KillWait, seconds between SIGTERM and SIGKILL when a step ends.
    cred_expire: AuthInfo's cred_expire, the lifetime of a step's credential,
      which is also how long a requeued job waits before it may start again
      (BeginTime = requeue + cred_expire + 1 s; Slurm's default is 120 s).
    debug: SlurmctldDebug/SlurmdDebug (info, verbose, debug, debug2, ...)."""

    def __init__(self, cluster, work, cpus=2, kill_wait=5, cred_expire=10, debug="info"):
        if not cluster.netns:
            raise RuntimeError("SlurmCluster needs a harness.Cluster with network namespaces")
        if len(cluster.hosts) < 2:
            raise RuntimeError("SlurmCluster needs at least two hosts")
        self.cluster = cluster
        self.hosts = cluster.hosts
        self.head = cluster.hosts[0]
        self.work = work
        self.cpus = cpus
        self.kill_wait = kill_wait
        self.cred_expire = cred_expire
        self.debug = debug
        self.tag = "slurm-%s-%x" % (cluster.tag, random.getrandbits(32))
        self.tmp = None
        self.conf = None
        self.munge_socket = None
        self.daemons = {}  # name (munged, slurmctld, slurmd-h0, ...) -> Popen
        self.clients = []  # Popens of spawn()
        self.logs = {}     # the same names -> log file
        self.closed = False

    # -- configuration -----------------------------------------------------

    def _write_config(self):
        # 0755: munged insists that every user can reach its socket's folder.
        self.tmp = tempfile.mkdtemp(prefix="cpt-slurm-")
        os.chmod(self.tmp, 0o755)
        for sub in ["state", "munge"] + [os.path.join("spool", h.name) for h in self.hosts]:
            os.makedirs(os.path.join(self.tmp, sub))
        os.chmod(os.path.join(self.tmp, "munge"), 0o755)
        self.munge_socket = os.path.join(self.tmp, "munge", "munge.socket")
        self.conf = os.path.join(self.tmp, "slurm.conf")
        # Each host is a network namespace of its own, so no port can clash
        # with a service of the machine; random ones all the same, so that two
        # clusters (or a system Slurm) never meet on one, and below Linux's
        # ephemeral range (32768-), where srun's own ports are.
        ctld_port = random.randint(20000, 25999)
        slurmd_port = ctld_port + 6000
        nodes = ",".join(h.name for h in self.hosts)
        lines = [
            "# Written by tests/slurm_cluster.py for one test cluster.",
            "ClusterName=cpt%s" % self.cluster.tag,
            "SlurmctldHost=%s(%s)" % (self.head.name, self.head.addr),
            "SlurmctldPort=%d" % ctld_port,
            "SlurmdPort=%d" % slurmd_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s,cred_expire=%d" % (self.munge_socket, self.cred_expire),
            "StateSaveLocation=%s" % os.path.join(self.tmp, "state"),
            # %n: the node's name (slurmd -N), one spool folder per host.
            "SlurmdSpoolDir=%s" % os.path.join(self.tmp, "spool", "%n"),
            "SlurmctldPidFile=%s" % os.path.join(self.tmp, "slurmctld.pid"),
            "SlurmdPidFile=%s" % os.path.join(self.tmp, "slurmd-%n.pid"),
            "SlurmctldLogFile=%s" % os.path.join(self.work, "slurmctld.log"),
            # slurmd's and its slurmstepds' log (slurmstepd logs only there).
            "SlurmdLogFile=%s" % os.path.join(self.work, "slurmd-%n.log"),
            "SlurmctldDebug=%s" % self.debug,
            "SlurmdDebug=%s" % self.debug,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            # Pending jobs looked at every second or two, not every 30-60 s:
            # a requeued job (held until its BeginTime) starts soon after.
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "ReturnToService=2",
            "JobRequeue=1",
            "KillWait=%d" % self.kill_wait,
            "InactiveLimit=0",
            "MinJobAge=300",
            "MessageTimeout=10",
            "SlurmdTimeout=60",
            "SlurmctldTimeout=60",
            "PropagateResourceLimits=NONE",
            "MailProg=/bin/true",
            # The nodes are as described here, whatever slurmd finds.
            "SlurmdParameters=config_overrides",
        ]
        for h in self.hosts:
            lines.append("NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d Boards=1 SocketsPerBoard=1 "
                         "CoresPerSocket=%d ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN"
                         % (h.name, h.addr, h.name, self.cpus, self.cpus))
        lines.append("PartitionName=all Nodes=%s Default=YES MaxTime=INFINITE State=UP" % nodes)
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        # slurmd 22.05 loads a cgroup plugin even with proctrack/linuxproc and
        # task/none, by default the one /sys/fs/cgroup calls for; but `ip
        # netns exec` mounts a sysfs of its own on /sys, where /sys/fs/cgroup
        # is an empty folder, and slurmd stops ("No filesystem mounted on
        # /sys/fs/cgroup ... slurmd initialization failed"). cgroup/v1 starts
        # without a mount; nothing here uses cgroups.
        with open(os.path.join(self.tmp, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\n")

    def env(self):
        """The environment daemons and clients get on top of the test's."""
        return {"SLURM_CONF": self.conf, TAG_VAR: self.tag}

    # -- daemons -----------------------------------------------------------

    def _spawn_daemon(self, name, host, argv):
        log = os.path.join(self.work, name + ".out")
        self.logs[name] = log
        self.daemons[name] = host.spawn(argv, log=log, env=self.env())
        return self.daemons[name]

    def _check_daemons(self):
        for name, p in self.daemons.items():
            if p.poll() is not None:
                raise AssertionError("%s exited with %s\n%s" % (name, p.returncode, self.log_tails()))

    def log_tails(self, limit=3000):
        """The end of the daemons' logs, for a failure message: slurmctld's
        and each slurmd's log file (slurmd's holds its slurmstepds' lines
        too), munged's output, and the output of any daemon that has exited
        (what it said before it had opened its log file)."""
        out = []
        for path in sorted(os.listdir(self.work)) if os.path.isdir(self.work) else []:
            if path.startswith(("slurmctld", "slurmd-")) and path.endswith(".log"):
                out.append("--- %s\n%s" % (os.path.join(self.work, path),
                                            _tail(os.path.join(self.work, path), limit)))
        for name, path in sorted(self.logs.items()):
            if name == "munged" or self.daemons[name].poll() is not None:
                out.append("--- %s (%s)\n%s" % (name, path, _tail(path, limit)))
        return "\n".join(out)

    def start(self, timeout=60):
        """Starts munged, slurmctld and the slurmds, and waits until every
        node is idle; on failure raises with the daemons' logs."""
        os.makedirs(self.work, exist_ok=True)
        self._write_config()
        key = os.path.join(self.tmp, "munge", "munge.key")
        subprocess.run([_which("mungekey"), "--create", "--keyfile", key], check=True,
                       capture_output=True, timeout=30)
        self._spawn_daemon("munged", self.head, [
            _which("munged"), "--foreground", "--socket", self.munge_socket, "--key-file", key,
            "--pid-file", os.path.join(self.tmp, "munge", "munged.pid"),
            "--seed-file", os.path.join(self.tmp, "munge", "munged.seed")])
        harness.wait_for(lambda: self._check_daemons() or os.path.exists(self.munge_socket),
                         timeout, "munged's socket " + self.munge_socket)
        self._spawn_daemon("slurmctld", self.head, [_which("slurmctld"), "-D", "-f", self.conf])
        for h in self.hosts:
            self._spawn_daemon("slurmd-" + h.name, h, [_which("slurmd"), "-D", "-N", h.name, "-f", self.conf])
        try:
            harness.wait_for(self._all_idle, timeout, "every Slurm node to be idle")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.log_tails()))
        return self

    def _all_idle(self):
        self._check_daemons()
        r = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=15, check=False)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(h.name) == "idle" for h in self.hosts)

    def node_states(self):
        """{node: state} as sinfo shows it (idle, alloc, mix, down*, ...)."""
        r = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=15)
        return dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)

    # -- clients -----------------------------------------------------------

    def client_argv(self, argv, host=None):
        """`argv` run on `host` (h0 unless told; its namespace and hostname),
        as a client of this cluster (SLURM_CONF and the cluster's tag set)."""
        host = host or self.head
        return host.argv(["env"] + ["%s=%s" % kv for kv in self.env().items()] + list(argv))

    def run(self, argv, timeout=60, check=True, input=None, host=None):
        """Runs a client command line on h0 (or `host`) to completion (at
        most `timeout` s); returns the CompletedProcess (text). check: a
        non-zero exit (or a timeout) raises, with its output and the daemons'
        logs."""
        try:
            r = subprocess.run(self.client_argv(argv, host), capture_output=True, text=True,
                               timeout=timeout, input=input, start_new_session=True)
        except subprocess.TimeoutExpired as e:
            raise AssertionError("%s: no end within %ds\nstdout: %s\nstderr: %s\n%s"
                                 % (" ".join(argv), timeout, e.stdout, e.stderr, self.log_tails()))
        if check and r.returncode != 0:
            raise AssertionError("%s: exit %d\nstdout: %s\nstderr: %s\n%s"
                                 % (" ".join(argv), r.returncode, r.stdout, r.stderr, self.log_tails()))
        return r

    def spawn(self, argv, log=None, host=None):
        """Starts a client command line on h0 (or `host`) in the background,
        output to `log`; a Popen that `close` kills (and reaps) if still
        running."""
        p = (host or self.head).spawn(argv, log=log, env=self.env())
        self.clients.append(p)
        return p

    def submit(self, argv, timeout=30):
        """sbatch --parsable `argv` (options, then the script): the job id."""
        r = self.run(["sbatch", "--parsable"] + list(argv), timeout=timeout)
        return int(r.stdout.strip().split(";")[0])

    # -- jobs --------------------------------------------------------------

    def job(self, job_id):
        """`scontrol show job -o JOB` as a dict (the first record: a job
        array's or het job's first part), or None once Slurm forgot the job."""
        r = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=15, check=False)
        if r.returncode != 0 or not r.stdout.strip():
            return None
        return parse_record(r.stdout.splitlines()[0])

    def job_field(self, job_id, field):
        """One field of the job's record (JobState, Restarts, NodeList, ...)."""
        record = self.job(job_id)
        return record.get(field) if record else None

    def wait_job_state(self, job_id, states, timeout=60):
        """Waits until the job's JobState is one of `states` (a name or a
        collection of names); returns it. A job that finishes in another
        state (FINISHED) fails the wait at once."""
        states = {states} if isinstance(states, str) else set(states)
        seen = []

        def reached():
            state = self.job_field(job_id, "JobState")
            seen[:] = [state]
            if state in FINISHED and state not in states:
                raise AssertionError("job %s ended %s, not %s\n%s" % (job_id, state, "/".join(sorted(states)),
                                                                      self.log_tails()))
            return state if state in states else None
        try:
            return harness.wait_for(reached, timeout, "job %s to be %s" % (job_id, "/".join(sorted(states))),
                                    interval=0.2)
        except AssertionError as e:
            raise AssertionError("%s (last state %s)\n%s" % (e, seen[0] if seen else None, self.log_tails()))

    def steps(self, job_id):
        """The job's running steps: [{StepId: 'JOB.N', ...}] (scontrol show step)."""
        r = self.run(["scontrol", "show", "step", "-o", str(job_id)], timeout=15, check=False)
        return [parse_record(line) for line in r.stdout.splitlines() if line.startswith("StepId=")]

    def requeue(self, job_id):
        """scontrol requeue JOB: the job goes back to the queue, keeps its id
        (and runs again cred_expire + 1 s later at the earliest)."""
        self.run(["scontrol", "requeue", str(job_id)], timeout=15)

    def signal(self, job_id, sig, batch=False, full=False):
        """scancel --signal=SIG JOB: to the job's steps' processes (batch: to
        the batch shell only; full: to the batch shell and the steps)."""
        argv = ["scancel", "--signal=%s" % sig]
        argv += ["--batch"] if batch else []
        argv += ["--full"] if full else []
        self.run(argv + [str(job_id)], timeout=15)

    def cancel(self, job_id):
        self.run(["scancel", str(job_id)], timeout=15)

    def jobs(self):
        """Ids of the jobs the controller knows of that have not finished."""
        r = self.run(["squeue", "--noheader", "--format=%i"], timeout=15, check=False)
        return [line.strip() for line in r.stdout.splitlines() if line.strip()]

    # -- stopping ----------------------------------------------------------

    def leftovers(self):
        """Pids of live processes of this cluster (daemons, slurmstepd,
        clients, tasks: all carry its tag)."""
        return harness.processes_with_env(TAG_VAR, self.tag)

    def close(self):
        """Cancels every job, stops the daemons (SIGTERM, then SIGKILL), kills
        any process of the cluster still alive, removes the temporary folder."""
        if self.closed:
            return
        self.closed = True
        ctld = self.daemons.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            try:
                self.run(["scancel", "--quiet", "--user=root"], timeout=15, check=False)
                harness.wait_for(lambda: not self.jobs(), 2 * self.kill_wait + 10, "every job to end")
            except AssertionError:
                pass  # killed below
        # slurmds first, then the controller, munged last (it authenticates
        # every message between them).
        order = sorted(self.daemons, key=lambda n: (n == "munged", n == "slurmctld"))
        for name in order:
            self._stop(self.daemons[name])
        # Clients (an srun whose step ended ends by itself) and slurmstepds
        # and tasks that outlived their slurmd (slurmstepd is a daemon of its
        # own, a child of init).
        for p in self.clients:
            if p.poll() is None:
                p.kill()
        for _ in range(3):
            pids = self.leftovers()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                harness.wait_for(lambda: not self.leftovers(), 10, "the cluster's processes to die")
            except AssertionError:
                pass
        for p in self.clients:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        left = self.leftovers()
        if left:
            print("slurm_cluster: processes of %s still alive after close: %s" % (self.tag, left),
                  file=sys.stderr)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @staticmethod
    def _stop(p, timeout=10):
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=timeout)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()
