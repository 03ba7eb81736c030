"""Scenario 4: a third node joins a running 2-node job (--nnodes 2:3). The
running nodes re-rendezvous to admit it without spending --max_restarts,
and training continues at the larger world size from the checkpoint.

Every worker logs its batches' sample indices (train --sample_log): the
one epoch, trained partly at world 4 and finished at world 6 from the
checkpoint, visits every sample, and repeats none beyond the sampler's
padding (fewer than the world size per re-shard).
"""
import os
import random
import unittest

from tests import harness
from tests import jobs

SAMPLES = 24576
TRAIN = ["--epochs", "1", "--limit", str(SAMPLES), "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


class JoinTest(unittest.TestCase):
    def test_third_node_joins(self):
        cluster = harness.Cluster(4)
        self.addCleanup(cluster.close)
        work = jobs.work_dir(self, "cpt-join-")
        server = jobs.Rendezvous(cluster.hosts[0], work)
        run_id = "join-%06x" % random.getrandbits(24)
        conf = jobs.fast_rdzv_conf(keep_alive=0.5, attempts=3, last_call=1.0)
        samples = os.path.join(work, "samples")
        train = TRAIN + ["--sample_log", samples]
        nodes = [jobs.Node(cluster.hosts[i], work, "node%d" % i, server.endpoint, "2:3",
                           run_id=run_id, max_restarts=0, launcher_args=conf, train_args=train)
                 for i in (1, 2)]
        harness.wait_for(lambda: all(n.joined(world_size=4) for n in nodes), 120, "the 2-node round")
        ckpt = os.path.join(work, "ckpt")
        jobs.wait_checkpoint(ckpt)
        nodes.append(jobs.Node(cluster.hosts[3], work, "node3", server.endpoint, "2:3",
                               run_id=run_id, max_restarts=0, launcher_args=conf, train_args=train))
        for n in nodes:
            self.assertEqual(n.wait(900), 0, n.text()[-4000:])
        for n in nodes[:2]:
            events = n.events()
            ended = jobs.named(events, "round_ended", round=1)
            # Ended while training, not during the exit barrier.
            self.assertEqual(jobs.named(events, "exit_barrier", round=1), [], events)
            self.assertEqual(len(ended), 1, events)
            self.assertRegex(ended[0]["reason"], r"wait|join", "the newcomer ended round 1")
            self.assertEqual([(e["cause"], e["counted"]) for e in jobs.named(events, "restart", from_round=1)],
                             [("membership", 0)], "restarts not consumed: %s" % events)
            self.assertEqual(jobs.named(events, "restart", counted=1), [],
                             "no restart was spent (--max_restarts 0)")
        self.assertTrue(nodes[2].joined(group_world_size=3, world_size=6), nodes[2].events())
        paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
        self.assertEqual(len(paths), 1)
        m = jobs.read_metrics(paths[0])
        self.assertEqual(m["world_size"], 6, "training finished at the larger world size")
        self.assertGreater(m["resumed_from_step"], 0, "the 3-node round resumed from the checkpoint")
        self.assertGreater(m["test_accuracy"], 0.70)

        counts, kept = jobs.epoch_coverage(samples, epoch=0)
        worlds = [world for _r, world, _s, batches in kept if batches > 0]
        self.assertEqual((worlds[0], worlds[-1]), (4, 6), "kept work at world 4, then 6: %s" % kept)
        self.assertEqual(kept[-1][2], m["resumed_from_step"], kept)
        missing = [i for i in range(SAMPLES) if counts[i] == 0]
        self.assertEqual(missing, [], "samples never trained on in the epoch (of %d): %s" %
                         (len(missing), missing[:20]))
        self.assertEqual(sorted(counts), list(range(SAMPLES)), "indices outside the data set")
        repeats = sum(c - 1 for c in counts.values())
        padding = sum(world - 1 for _r, world, _s, _b in kept)
        self.assertLessEqual(repeats, padding, "samples trained twice beyond the sampler's padding: "
                             "%s" % sorted(i for i, c in counts.items() if c > 1)[:20])
        self.assertEqual(jobs.job_leftovers(run_id), [])


if __name__ == "__main__":
    harness.main()
