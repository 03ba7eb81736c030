"""Stragglers: a worker whose CPU time is throttled (stopped two thirds of
the time, in 150 ms cycles, as a CPU quota does) is reported by its
launcher with its rank, its host and how much slower it computes, and the
job goes on; an even job of the same size reports none. With one worker on
each of two hosts (its peers on another node, as the rendezvous tells its
launcher), the throttled host's launcher reports it and the other none."""
import os
import random
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--progress", "none"]


class StragglerTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(3)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-straggler-")
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work)
        self.run_id = "straggler-%06x" % random.getrandbits(24)

    def node(self, name):
        work = os.path.join(self.work, name)
        os.makedirs(work)
        return jobs.Node(self.cluster.hosts[1], work, "node", self.server.endpoint, "1:1",
                         run_id=self.run_id + name, train_args=TRAIN)

    def test_a_throttled_worker_is_reported_and_an_even_job_has_none(self):
        even = self.node("even")
        self.assertEqual(even.wait(600), 0, even.text()[-3000:])
        self.assertEqual(jobs.named(even.events(), "straggler_detected"), [], "an even job has no straggler")

        slow = self.node("slow")
        victim = harness.wait_for(slow.worker_pids, 60, "the workers")[1]
        reported = lambda: jobs.named(slow.events_so_far(), "straggler_detected")
        # The fault: a CPU quota (bounded: at most 120 s, and never past the
        # report or the worker's end).
        harness.throttle(victim, 120, stop=lambda: reported() or slow.proc.poll() is not None)
        # `status --json` while the job goes on shows it (polled until it
        # does or the job ends).
        shown = harness.wait_for(lambda: jobs.node_fault(jobs.status_json(
            self.cluster.hosts[1], self.server.endpoint, self.run_id + "slow"), "last_straggler")
            or slow.proc.poll() is not None, 120, "the straggler in status, or the job's end")
        self.assertEqual(slow.wait(600), 0, slow.text()[-3000:])
        self.assertIsInstance(shown, dict, "the job ended before status showed the straggler")
        self.assertEqual(shown["hosts"], [self.cluster.hosts[1].name], shown)
        self.assertGreaterEqual(shown["slowdown"], 1.5, shown)
        found = jobs.named(slow.events(), "straggler_detected")
        self.assertEqual(len(found), 1, slow.events())
        self.assertEqual(found[0]["hosts"], [self.cluster.hosts[1].name], found)
        self.assertEqual(found[0]["policy"], "warn")
        self.assertGreaterEqual(found[0]["slowdown"], 1.5, found)
        self.assertEqual(len(found[0]["ranks"]), 1)
        self.assertIn("is a straggler: computes", slow.text())
        # Throttled, it is stopped at many looks but still steps: no hang.
        self.assertEqual(jobs.named(slow.events(), "hang_detected"), [], "a throttled worker is not hung")
        self.assertEqual(jobs.job_leftovers(self.run_id + "slow"), [])


    def test_a_throttled_worker_is_found_against_the_other_nodes_ranks(self):
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, train_args=TRAIN)
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, train_args=TRAIN)
        victim = harness.wait_for(b.worker_pids, 60, "node B's worker")[0]
        reported = lambda: jobs.named(b.events_so_far(), "straggler_detected")
        harness.throttle(victim, 120, stop=lambda: reported() or b.proc.poll() is not None)
        self.assertEqual(b.wait(600), 0, b.text()[-3000:])
        self.assertEqual(a.wait(600), 0, a.text()[-3000:])
        found = jobs.named(b.events(), "straggler_detected")
        self.assertEqual(len(found), 1, b.events())
        self.assertEqual(found[0]["hosts"], [self.cluster.hosts[2].name], found)
        self.assertGreaterEqual(found[0]["slowdown"], 1.5, found)
        self.assertEqual(jobs.named(a.events(), "straggler_detected"), [], "node A's worker only waited")
        self.assertEqual(jobs.job_leftovers(self.run_id), [])


if __name__ == "__main__":
    harness.main()
