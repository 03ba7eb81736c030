"""Scenarios 3 and 7: a node leaves a running 2-node job (--nnodes 1:2).

3. Node B's launcher is killed with SIGKILL, or B is cut off the network (its
   veth goes down): node A learns of it through the rendezvous, re-forms a
   round alone, resumes from the checkpoint at half the world size, and
   finishes. Nothing hangs.
7. SIGTERM to node B's launcher: B's workers stop, B's summary names the
   signal, A carries on alone, and no process of the job is left anywhere.

How fast A learns of a silent death is measured by the recovery benchmark
(bench/); here the bound only catches "never".
"""
import os
import random
import signal
import time
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "24576", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]
KEEP_ALIVE, ATTEMPTS = 0.5, 2


class MembershipTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(3)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-member-")
        self.server = jobs.Rendezvous(self.cluster.hosts[0], self.work)
        self.run_id = "member-%06x" % random.getrandbits(24)
        conf = jobs.fast_rdzv_conf(KEEP_ALIVE, ATTEMPTS, last_call=1.0)
        self.a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "1:2",
                           run_id=self.run_id, launcher_args=conf, train_args=TRAIN)
        self.b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "1:2",
                           run_id=self.run_id, launcher_args=conf, train_args=TRAIN)
        harness.wait_for(lambda: self.a.joined(world_size=4) and self.b.joined(world_size=4),
                         120, "a 2-node round")
        ckpt = os.path.join(self.work, "ckpt")
        jobs.wait_checkpoint(ckpt)

    def finishes_alone(self, lost_at):
        """A leaves round 1 (through the rendezvous, or because its workers
        lost their peers first: both are legitimate), re-forms alone, finishes."""
        self.assertEqual(self.a.wait(600), 0, self.a.text()[-4000:])
        events = self.a.events()
        left = jobs.left_round(events, 1)
        self.assertTrue(left and left[0] >= lost_at - 1, "node A never left round 1: %s" % events)
        # Generous: catches a node that never notices (torchrun's hang), not speed.
        self.assertLess(left[0] - lost_at, 10 * KEEP_ALIVE * ATTEMPTS + 10, left[1])
        # Alone in a later round: node 0 of 1, so its 2 workers are ranks 0..1 of 2.
        alone = [e for e in jobs.named(events, "round_joined", group_rank=0, group_world_size=1, world_size=2)
                 if e["round"] > 1]
        self.assertTrue(alone, events)
        m = jobs.read_metrics(self.a.metrics)
        self.assertEqual(m["world_size"], 2, "A resumed at half the world size")
        self.assertGreater(m["resumed_from_step"], 0)
        self.assertGreater(m["test_accuracy"], 0.70)

    def test_launcher_sigkill(self):
        os.kill(self.b.proc.pid, signal.SIGKILL)
        lost_at = time.time()
        self.b.proc.wait(timeout=30)
        self.finishes_alone(lost_at)
        harness.wait_for(lambda: not jobs.job_leftovers(self.run_id), 30,
                         "B's workers to die with their launcher (PR_SET_PDEATHSIG)")

    def test_network_cut(self):
        if not self.cluster.netns:
            self.skipTest("cutting a host off needs network namespaces: " + self.cluster.why_not_netns)
        self.cluster.hosts[2].cut()
        lost_at = time.time()
        self.finishes_alone(lost_at)
        # Cut off, B's sockets neither close nor reset: only the rendezvous's
        # keep-alive rule can tell A, and it must.
        ended = jobs.named(self.a.events(), "round_ended", round=1)
        self.assertTrue(ended, self.a.events())
        self.assertRegex(ended[0]["reason"], r"dead|keep-alive|silent|missed",
                         "A learned of B through the rendezvous's keep-alive rule")
        # B, cut off, gives up on its own within the join timeout; the
        # cluster kills it at the end if it does not.

    def test_sigterm_one_launcher(self):
        os.kill(self.b.proc.pid, signal.SIGTERM)
        lost_at = time.time()
        rc = self.b.wait(120)
        self.assertEqual(rc, 128 + signal.SIGTERM, self.b.text()[-3000:])
        finished = jobs.named(self.b.events(), "finished")
        self.assertEqual([(e["exit_code"], e["reason"]) for e in finished],
                         [(128 + signal.SIGTERM, "signal SIGTERM")], self.b.events())
        self.finishes_alone(lost_at)
        self.assertEqual(jobs.job_leftovers(self.run_id), [])


if __name__ == "__main__":
    harness.main()
