"""Scenarios 1 and 2 of multi-node training on fake GPUs, each node a host
of its own (a network namespace, or a loopback address where namespaces are
not allowed), the rendezvous server on a third host:

1. 2 nodes x 2 fake GPUs reach the same test accuracy as 1 node x 4.
2. kill -9 of one worker on node B mid-training: both nodes restart in a new
   round, resume from the checkpoint, finish with one restart spent (on node
   B) and the accuracy of the undisturbed run.
3. 2 nodes x 2 CPU workers (no fake GPUs): `--backend auto` all-reduces
   hierarchically (shared memory within a node, Gloo between the nodes) and
   reaches the same accuracy.
"""
import os
import random
import signal
import unittest

from tests import harness
from tests import jobs

# Enough samples that the run lasts a few seconds past its first checkpoint.
TRAIN = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "16",
         "--heartbeat_interval", "0.2", "--progress", "lines"]
TOLERANCE = 0.005  # test accuracy, absolute (0.5 points)


class ElasticTrainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = harness.Cluster(3)
        cls.work = jobs.work_dir(cls, "cpt-elastic-")
        cls.server = jobs.Rendezvous(cls.cluster.hosts[0], cls.work)
        # The undisturbed reference: one node with 4 fake GPUs.
        work = os.path.join(cls.work, "single")
        os.makedirs(work)
        node = jobs.Node(cls.cluster.hosts[1], work, "single", cls.server.endpoint, "1:1", nproc=4,
                         run_id=cls.run_id("single"), train_args=TRAIN)
        rc = node.wait(600)
        assert rc == 0, "reference run failed (%d):\n%s" % (rc, node.text()[-4000:])
        cls.reference = jobs.read_metrics(node.metrics)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    @staticmethod
    def run_id(name):
        return "%s-%06x" % (name, random.getrandbits(24))

    def test_two_cpu_nodes_all_reduce_hierarchically(self):
        work, run_id, a, b = self.two_nodes("hier", fake_gpus=False)
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        m = self.finished_metrics(a, b)
        self.assertEqual((m["world_size"], m["backend"]), (4, "hierarchical"))
        self.assertEqual(m["samples"], self.reference["samples"])
        # The same average in another order of additions: equal to rounding.
        self.assertAlmostEqual(m["test_accuracy"], self.reference["test_accuracy"], delta=TOLERANCE)
        self.assertEqual(jobs.job_leftovers(run_id), [])

    def two_nodes(self, name, **kw):
        work = os.path.join(self.work, name)
        os.makedirs(work)
        run_id = self.run_id(name)
        a = jobs.Node(self.cluster.hosts[1], work, "nodeA", self.server.endpoint, "2:2",
                      run_id=run_id, train_args=TRAIN, **kw)
        b = jobs.Node(self.cluster.hosts[2], work, "nodeB", self.server.endpoint, "2:2",
                      run_id=run_id, train_args=TRAIN, **kw)
        return work, run_id, a, b

    def finished_metrics(self, *nodes):
        paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
        self.assertEqual(len(paths), 1, "exactly one node holds rank 0 and writes metrics")
        return jobs.read_metrics(paths[0])

    def test_two_nodes_match_one_node(self):
        work, run_id, a, b = self.two_nodes("split")
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        m = self.finished_metrics(a, b)
        self.assertEqual(m["world_size"], 4)
        self.assertEqual(m["restart_count"], 0)
        # Both nodes share one --log_dir: a folder each, every rank's output kept.
        folders = jobs.node_log_folders(work, run_id)
        self.assertEqual(len(folders), 2, folders)
        for attempts in folders.values():
            self.assertEqual(attempts, {0: [0, 1]})
        self.assertEqual(m["samples"], self.reference["samples"])
        self.assertAlmostEqual(m["test_accuracy"], self.reference["test_accuracy"], delta=TOLERANCE)
        self.assertEqual(jobs.job_leftovers(run_id), [])

    def test_worker_kill_restarts_both_nodes_from_checkpoint(self):
        work, run_id, a, b = self.two_nodes("kill")
        ckpt = os.path.join(work, "ckpt")
        jobs.wait_checkpoint(ckpt)
        victims = harness.wait_for(b.worker_pids, 30, "node B's workers")
        os.kill(victims[0], signal.SIGKILL)
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        m = self.finished_metrics(a, b)
        self.assertEqual(m["world_size"], 4)
        # As in torchrun, only the node whose worker failed spends a restart
        # (TORCHELASTIC_RESTART_COUNT); the other node restarts its group for
        # the new round without spending one. Read from the event logs.
        ev_a, ev_b = a.events(), b.events()
        restart_b = [e for e in ev_b if e["event"] == "restart"]
        restart_a = [e for e in ev_a if e["event"] == "restart"]
        self.assertEqual([(e["cause"], e["counted"], e["restart_count"]) for e in restart_b],
                         [("worker_failed", 1, 1)], ev_b)
        # Node A restarts once too, for the new round: without spending a
        # restart when it learns of the round's end first; but the kill also
        # breaks A's workers' connections to node B at once, and on a loaded
        # machine they may fail of it before the round's end reaches A (a
        # race torchrun's agent has the same way). Then A counts that one
        # failure, and its workers' own reports name node B as the peer.
        self.assertEqual(len(restart_a), 1, ev_a)
        seen_a = (restart_a[0]["cause"], restart_a[0]["counted"], restart_a[0]["restart_count"])
        if seen_a != ("membership", 0, 0):
            self.assertEqual(seen_a, ("worker_failed", 1, 1), ev_a)
            reports = [e["message"] for e in ev_a if e["event"] == "worker_reported_failure"]
            self.assertTrue(reports and all(self.cluster.hosts[2].addr in r or "aborted the group" in r
                                            for r in reports), ev_a)
        for e in restart_a + restart_b:
            phases = e["detected_to_stopped_s"] + e["stopped_to_joined_s"] + e["joined_to_started_s"]
            self.assertAlmostEqual(phases, e["total_s"], places=5)
        self.assertEqual([e["round"] for e in ev_a if e["event"] == "round_joined"], [1, 2])
        failed = [e for e in ev_b if e["event"] == "worker_failed"]
        self.assertEqual(len(failed), 1, ev_b)
        self.assertIn("SIGKILL", failed[0]["status"])
        # Node B's whole restart, from the kill's detection to every local
        # worker's first step: its phases add up to the total, and the total
        # is what the event log's own clock says (within 10%, + 50 ms for the
        # time between a worker's event and the line's write).
        done = [e for e in ev_b if e["event"] == "restart_completed"]
        self.assertEqual(len(done), 1, ev_b)
        d = done[0]
        parts = (d["detected_to_stopped_s"] + d["stopped_to_joined_s"] + d["joined_to_started_s"] +
                 d["started_to_comm_ready_s"] + d["comm_ready_to_restored_s"] + d["restored_to_first_step_s"])
        self.assertAlmostEqual(parts, d["total_s"], places=5)
        measured = d["time"] - failed[0]["time"]
        self.assertLessEqual(abs(measured - d["total_s"]), 0.1 * measured + 0.05, (measured, d))
        self.assertGreater(d["comm_ready_to_restored_s"] + d["restored_to_first_step_s"], 0, d)
        for ev in (ev_a, ev_b):
            self.assertEqual((ev[-1]["event"], ev[-1]["exit_code"]), ("finished", 0))
        self.assertGreater(m["resumed_from_step"], 0, "the restarted group resumed from a checkpoint")
        self.assertAlmostEqual(m["test_accuracy"], self.reference["test_accuracy"], delta=TOLERANCE)
        self.assertIn("SIGKILL", b.text(), "node B's log names the signal that killed its worker")
        self.assertEqual(jobs.job_leftovers(run_id), [])


if __name__ == "__main__":
    harness.main()
