"""A rendezvous server killed (SIGKILL) and started again on the same port
at each phase of a 2-node job must be invisible (issue 14): the job
finishes exit 0, and no round ends and no restart is spent.

- forming: one node waits to join when the server dies; the other joins
  the new server;
- store traffic: the workers are bootstrapping (Gloo addresses, the NCCL
  id through the round's store) when the server dies, so their store calls
  reach the new server before their agents' keep-alives;
- exit barrier: one node has finished and waits for the other in the exit
  barrier when the server dies (its count used to be lost with it).
The active phase (mid-training) is elastic_faults_test's.
"""
import os
import random
import subprocess
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "6144", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


class ServerRestartTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(3)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-restart-")
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work)
        self.run_id = "restart-%06x" % random.getrandbits(24)
        self.conf = jobs.fast_rdzv_conf(join_timeout=120)

    def status(self):
        r = subprocess.run(self.cluster.hosts[1].argv(
            [harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", self.server.endpoint,
             "--rdzv_id", self.run_id]), capture_output=True, text=True, timeout=60)
        return r.stdout if r.returncode == 0 else None

    def restart_server(self):
        port = self.server.port
        self.server.kill()
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work, port=port)

    def node(self, i, **kw):
        return jobs.Node(self.cluster.hosts[i], self.work, "node%d" % i, self.server.endpoint, "2:2",
                         run_id=self.run_id, launcher_args=self.conf, **kw)

    def assert_undisturbed(self, nodes, train=True):
        for n in nodes:
            self.assertEqual(n.wait(600), 0, n.text()[-4000:])
        for n in nodes:
            events = n.events()
            # Neither a round's end nor a restart of the workers, counted or not.
            self.assertEqual([e for e in events if e["event"] in ("round_ended", "restart")], [],
                             "the restart was visible: %s" % events)
        if train:
            paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
            self.assertEqual(len(paths), 1)
            m = jobs.read_metrics(paths[0])
            self.assertEqual(m["world_size"], 4)
            self.assertEqual(m["restart_count"], 0)
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_while_forming(self):
        a = self.node(1, train_args=TRAIN)
        harness.wait_for(self.status, 60, "node 1's Join to reach the server")
        self.restart_server()
        b = self.node(2, train_args=TRAIN)
        self.assert_undisturbed([a, b])

    def test_during_the_workers_store_traffic(self):
        a = self.node(1, train_args=TRAIN)
        b = self.node(2, train_args=TRAIN)
        # The round is complete and the workers are being started: their
        # bootstrap goes through the round's store now.
        harness.wait_for(lambda: all(n.joined(world_size=4) for n in (a, b)), 120, "round 1")
        self.restart_server()
        self.assert_undisturbed([a, b])

    def test_during_the_exit_barrier(self):
        go = os.path.join(self.work, "go")
        # Group rank 0's worker is done at once; group rank 1's waits for
        # the test's go-ahead, so node of group rank 0 waits in the barrier.
        worker = ['/bin/sh', '-c',
                  '[ "$GROUP_RANK" = 0 ] || while [ ! -e "$0" ]; do sleep 0.05; done', go]
        a = jobs.Node(self.cluster.hosts[1], self.work, "node1", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, launcher_args=self.conf + ["--no_python"], program=worker)
        b = jobs.Node(self.cluster.hosts[2], self.work, "node2", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, launcher_args=self.conf + ["--no_python"], program=worker)
        waiting = harness.wait_for(
            lambda: [n for n in (a, b) if jobs.named(n.events_so_far(), "exit_barrier")], 120,
            "a node in the exit barrier")
        self.assertEqual(len(waiting), 1)
        self.restart_server()
        harness.wait_for(self.status, 60, "the restarted server to know the run again")
        with open(go, "w") as f:
            f.write("go\n")
        self.assert_undisturbed([a, b], train=False)


if __name__ == "__main__":
    harness.main()
