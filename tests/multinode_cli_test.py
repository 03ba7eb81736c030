"""A multi-node job launched as every torchrun guide launches one: two hosts
(network namespaces, each with its own hostname and a Debian-style
/etc/hosts that puts its own name on 127.0.1.1), the same command line on
both, `--rdzv_endpoint <host 0>:29400` by IP or by hostname, no
`--local_addr`, no `is_host`, and one `--log_dir` shared by both nodes (a
shared filesystem). Host 0 must serve the endpoint, both nodes must train
together as ranks 0..3 of 4 with a MASTER_ADDR the other host can reach,
and the shared log folder must hold every rank's output. Under srun the
same holds with nothing but Slurm's environment to say where to meet.
"""
import os
import re
import subprocess
import sys
import unittest

from tests import harness
from tests import jobs

NPROC = 2
PORT = 29400

# Leaves a connection on ADDR:PORT in TIME_WAIT on its server side (the
# server closes first), then prints what the kernel says of the port.
TIME_WAIT_ON_PORT = """
import socket, subprocess, sys
addr, port = sys.argv[1], int(sys.argv[2])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((addr, port))
listener.listen(1)
client = socket.create_connection((addr, port), timeout=10)
served, _ = listener.accept()
served.close()
assert client.recv(1) == b""
client.close()
listener.close()
print(subprocess.run(["ss", "-tan", "state", "time-wait", "sport", "= :%d" % port],
                     capture_output=True, text=True).stdout.lower().replace("time_wait", "time-wait")
      or "none")
try:
    plain = socket.socket()
    plain.bind((addr, port))
    print("plain bind: free")
except OSError as e:
    print("plain bind refused: time-wait (%s)" % e)
"""  # torchrun's default: each host is a namespace of its own


class MultiNodeCommandLineTest(unittest.TestCase):
    def setUp(self):
        ok, why = harness.netns_available()
        if not ok:
            self.skipTest("needs network namespaces (hosts with their own addresses and names): " + why)
        self.cluster = harness.Cluster(2, use_netns=True)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-multinode-")

    def run_job(self, endpoint_host, slurm=False, pet=None):
        """`pet`: "static" or "c10d": the job given by Kubeflow's PET_*
        variables alone (Trainer v2 sets PET_NNODES, PET_NPROC_PER_NODE,
        PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; an elastic
        PyTorchJob sets PET_RDZV_*), no launcher flag saying where to meet."""
        logs = os.path.join(self.work, "logs")  # one folder for both nodes
        run_id = "777" if slurm else "guide"
        # Every rank prints its environment, then trains (Gloo across the
        # two hosts, the NCCL bootstrap over the rendezvous store).
        worker = ('echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE group=$GROUP_RANK '
                  'master=$MASTER_ADDR:$MASTER_PORT host=$(hostname)"; exec "$@"')
        job = [] if slurm or pet else ["--nnodes", "2", "--rdzv_backend", "c10d",
                                       "--rdzv_endpoint", "%s:%d" % (endpoint_host, PORT), "--rdzv_id", run_id]
        argv = [harness.binary(jobs.LAUNCHER)] + job + [
                "--nproc_per_node", str(NPROC), "--fake_gpus", str(NPROC),
                "--max_restarts", "0", "--log_dir", logs, "--tee", "3", "--no_python",
                "/bin/sh", "-c", worker, "sh", harness.binary(jobs.TRAIN),
                "--epochs", "1", "--limit", "2048", "--progress", "none",
                "--metrics_json", os.path.join(self.work, "metrics.json")]
        nodes = []
        for i, host in enumerate(self.cluster.hosts):
            log = os.path.join(self.work, "%s-%s.log" % (endpoint_host, host.name))
            # What srun sets for one task per node (a job step).
            env = {"SLURM_JOB_ID": run_id, "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
                   "SLURM_NODEID": str(i), "SLURM_PROCID": str(i), "SLURM_NTASKS": "2",
                   "SLURM_JOB_NODELIST": "h[0-1]"} if slurm else None
            if pet == "static":
                env = {"PET_NNODES": "2", "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": endpoint_host,
                       "PET_MASTER_PORT": str(PORT)}
            elif pet == "c10d":
                env = {"PET_NNODES": "2", "PET_RDZV_BACKEND": "c10d",
                       "PET_RDZV_ENDPOINT": "%s:%d" % (endpoint_host, PORT), "PET_RDZV_ID": run_id}
            proc = host.spawn(argv, log=log, env=env)
            nodes.append((host, proc, log))
        texts = []
        for host, proc, log in nodes:
            try:
                rc = proc.wait(timeout=300)
            except Exception:
                rc = None
            with open(log, errors="replace") as f:
                text = f.read()
            texts.append(text)
            self.assertEqual(rc, 0, "%s exited %s:\n%s" % (host.name, rc, text[-4000:]))
        if slurm:
            run_id += ".0"  # the job step: <SLURM_JOB_ID>.<SLURM_STEP_ID>
        elif pet == "static":
            run_id = "none"  # torchrun's default --rdzv_id
        return logs, run_id, texts

    def check(self, endpoint_host, slurm=False, pet=None):
        logs, run_id, (text0, text1) = self.run_job(endpoint_host, slurm, pet)
        # Host 0 served the endpoint; host 1 was its client, quietly.
        self.assertRegex(text0, r"serving the rendezvous at ")
        self.assertNotRegex(text1, r"serving the rendezvous at ")
        for text in (text0, text1):
            for raw in ("Address already in use", "Failed to add", "bind"):
                self.assertNotIn(raw, text, "no raw bind error on the console")
        # Each node says which address it took and why: the route's source.
        addrs = [h.addr for h in self.cluster.hosts]
        for text, addr in zip((text0, text1), addrs):
            self.assertRegex(text, r"this node's address: %s \(" % re.escape(addr))
        # Ranks 0..3 of 4, with MASTER_ADDR an address host 1 can reach.
        seen = {}
        for text, host in zip((text0, text1), self.cluster.hosts):
            for m in re.finditer(r"rank=(\d+) local=(\d+) world=(\d+) group=(\d+) master=([^:]+):(\d+) "
                                 r"host=(\S+)", text):
                rank, local, world, group, master, _port, where = m.groups()
                self.assertEqual(where, host.name)
                self.assertEqual(int(world), 2 * NPROC)
                # Static (torchrun's way): MASTER_ADDR is the address as given.
                self.assertEqual(master, endpoint_host if pet == "static" else addrs[0],
                                 "MASTER_ADDR is host 0's reachable address")
                seen[int(rank)] = (host.name, int(local), int(group))
        self.assertEqual(sorted(seen), list(range(2 * NPROC)), seen)
        # Training happened across both hosts: rank 0 wrote the figures.
        metrics = jobs.read_metrics(os.path.join(self.work, "metrics.json"))
        self.assertEqual(metrics["world_size"], 2 * NPROC)
        # One shared --log_dir: a folder per node, every rank's output kept.
        own = sorted(d for d in os.listdir(logs) if d.startswith(run_id + "_"))
        self.assertEqual(len(own), 2, os.listdir(logs))
        ranks_logged = set()
        for d in own:
            for local in range(NPROC):
                path = os.path.join(logs, d, "attempt_0", str(local), "stdout.log")
                with open(path) as f:
                    m = re.search(r"rank=(\d+) local=%d " % local, f.read())
                self.assertIsNotNone(m, path)
                ranks_logged.add(int(m.group(1)))
        self.assertEqual(ranks_logged, set(range(2 * NPROC)))
        self.assertEqual(jobs.job_leftovers(run_id), [])

    def test_endpoint_by_ip(self):
        self.check(self.cluster.hosts[0].addr)

    def test_endpoint_by_hostname(self):
        self.check(self.cluster.hosts[0].name)

    def test_relaunched_at_once_on_the_same_endpoint_port(self):
        # The first job's rendezvous connections wait in TIME_WAIT on h0's
        # port 29400 for a minute; the same job launched again at once must
        # find h0 serving it again (issue 32), not a client of nobody.
        self.check(self.cluster.hosts[0].addr)
        os.rename(os.path.join(self.work, "logs"), os.path.join(self.work, "logs-first"))
        os.remove(os.path.join(self.work, "metrics.json"))
        # Which side closed each connection first is a race; make sure one
        # closed by the server side waits in TIME_WAIT on h0's port, as a
        # finished rendezvous server's connections do.
        h0 = self.cluster.hosts[0]
        r = subprocess.run(h0.argv([sys.executable, "-c", TIME_WAIT_ON_PORT, h0.addr, str(PORT)]),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("time-wait", r.stdout)
        self.check(self.cluster.hosts[0].addr)

    def add_host_alias(self, alias, host):
        # A Kubernetes headless service's name: it resolves to the pod's
        # address on every host, and is no host's own hostname.
        for h in self.cluster.hosts:
            with open(os.path.join("/etc/netns", h.netns, "hosts"), "a") as f:
                f.write("%s %s\n" % (host.addr, alias))

    def test_kubeflow_trainer_static_from_pet_variables_and_a_headless_service(self):
        alias = "trainjob-node-0-0.trainjob"
        self.add_host_alias(alias, self.cluster.hosts[0])
        self.check(alias, pet="static")

    def test_kubeflow_elastic_rdzv_from_pet_variables_and_a_headless_service(self):
        alias = "pytorchjob-master-0.default.svc"
        self.add_host_alias(alias, self.cluster.hosts[0])
        self.check(alias, pet="c10d")

    def test_under_srun_everything_from_slurms_environment(self):
        # No --nnodes, --rdzv_*: srun's variables say it (the endpoint is
        # the first host of SLURM_JOB_NODELIST, h0, by name).
        self.assertEqual([h.name for h in self.cluster.hosts], ["h0", "h1"])
        self.check("h0", slurm=True)
        for i, host in enumerate(self.cluster.hosts):
            with open(os.path.join(self.work, "h0-%s.log" % host.name)) as f:
                self.assertIn("Slurm job 777 step 0 (node %d): took " % i, f.read())


if __name__ == "__main__":
    harness.main()
