"""Scenario 4: a third node joins a running 2-node job (--nnodes 2:3). The
running nodes re-rendezvous to admit it without spending --max_restarts,
and training continues at the larger world size from the checkpoint.

That the re-sharded epoch skips and repeats no sample is asserted where the
sampler's positions can be seen, in worker/trainer_test (world size changed
across a restart); here the job-level facts are checked.
"""
import os
import random
import tempfile
import unittest

import harness
import jobs

TRAIN = ["--epochs", "1", "--limit", "24576", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


class JoinTest(unittest.TestCase):
    def test_third_node_joins(self):
        cluster = harness.Cluster(4)
        self.addCleanup(cluster.close)
        work = tempfile.mkdtemp(prefix="cpt-join-")
        server = jobs.RdzvServer(cluster.hosts[0], work)
        run_id = "join-%06x" % random.getrandbits(24)
        conf = jobs.fast_rdzv_conf(keep_alive=0.5, attempts=3, last_call=1.0)
        nodes = [jobs.Node(cluster.hosts[i], work, "node%d" % i, server.endpoint, "2:3",
                           run_id=run_id, max_restarts=0, launcher_args=conf, train_args=TRAIN)
                 for i in (1, 2)]
        harness.wait_for(lambda: all(" of 4, master" in n.text() for n in nodes), 120,
                         "the 2-node round")
        ckpt = os.path.join(work, "ckpt")
        jobs.wait_checkpoint(ckpt)
        nodes.append(jobs.Node(cluster.hosts[3], work, "node3", server.endpoint, "2:3",
                               run_id=run_id, max_restarts=0, launcher_args=conf, train_args=TRAIN))
        for n in nodes:
            self.assertEqual(n.wait(900), 0, n.text()[-4000:])
        for n in nodes[:2]:
            self.assertRegex(n.text(), r"round 1 ended \(.*(wait|join)", "the newcomer ended round 1")
            self.assertIn("restarts not consumed", n.text())
            self.assertNotIn("restarting, 1 of", n.text(), "no restart was spent (--max_restarts 0)")
        self.assertRegex(nodes[2].text(), r"round \d+: node \d of 3, ranks \d+\.\.\d+ of 6")
        paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
        self.assertEqual(len(paths), 1)
        m = jobs.read_metrics(paths[0])
        self.assertEqual(m["world_size"], 6, "training finished at the larger world size")
        self.assertGreater(m["resumed_from_step"], 0, "the 3-node round resumed from the checkpoint")
        self.assertGreater(m["test_accuracy"], 0.70)
        self.assertEqual(jobs.job_leftovers(run_id), [])


if __name__ == "__main__":
    harness.main()
