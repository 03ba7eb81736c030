"""In-place recovery (`--recovery in_place`, docs/DESIGN.md): a worker
killed with SIGKILL costs the job its interrupted step, not a restart. The
other workers keep their processes (their pids are the same to the end),
only the lost local rank starts again, it receives the model, the optimizer
and the position from a survivor (no --checkpoint_dir at all), and the rest
of the epoch is re-sharded so that every sample is trained on exactly once.

1. One node, 2 workers on fake GPUs, launched as a user types it
   (`--standalone`); an undisturbed run of the same job is the accuracy
   reference.
2. Two hosts (network namespaces with their own hostnames), 2 workers each,
   the endpoint by host 0's name, no --local_addr; a worker on host 1 is
   killed: both nodes' survivors stay, a new round forms, the job finishes.
"""
import collections
import json
import os
import signal
import unittest

from tests import harness
from tests import jobs

SAMPLES = 16384
TRAIN = ["--epochs", "1", "--limit", str(SAMPLES), "--progress", "lines", "--heartbeat_interval", "0.2"]
TOLERANCE = 0.005  # test accuracy, absolute (0.5 points)
PORT = 29400


def sample_lines(folder):
    """Batches logged so far, every rank and round together."""
    if not os.path.isdir(folder):
        return 0
    total = 0
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            total += sum(1 for line in f if line[:1].isdigit())
    return total


def launcher_events(log_root):
    """The event logs of every launcher under --log_dir, by folder."""
    out = {}
    for name in sorted(os.listdir(log_root)):
        path = os.path.join(log_root, name, "events.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                out[name] = [json.loads(line) for line in f if line.endswith("\n")]
    return out


def named(events, name):
    return [e for e in events if e["event"] == name]


class InPlaceRecoveryTest(unittest.TestCase):
    def setUp(self):
        self.work = jobs.work_dir(self, "cpt-inplace-")

    def job(self, host, name, launcher_args, extra=()):
        """One launcher of a job on `host`: its process, metrics file, sample log folder."""
        folder = os.path.join(self.work, name)
        os.makedirs(folder, exist_ok=True)
        metrics = os.path.join(self.work, name + "-metrics.json")
        samples = os.path.join(self.work, name + "-samples")
        argv = [harness.binary(jobs.LAUNCHER)] + launcher_args + [
            "--nproc_per_node", "2", "--fake_gpus", "2", "--max_restarts", "3",
            "--log_dir", os.path.join(folder, "logs"), "--tee", "3",
            harness.binary(jobs.TRAIN), "--metrics_json", metrics, "--sample_log", samples] + TRAIN + list(extra)
        proc = host.spawn(argv, log=os.path.join(folder, "launcher.log"))
        return proc, metrics, samples, folder

    def text(self, folder):
        with open(os.path.join(folder, "launcher.log"), errors="replace") as f:
            return f.read()[-6000:]

    def assert_every_sample_once(self, *sample_folders):
        merged = os.path.join(self.work, "samples-merged")
        os.makedirs(merged, exist_ok=True)
        for folder in sample_folders:
            for name in os.listdir(folder):
                os.link(os.path.join(folder, name), os.path.join(merged, name))
        counts, kept = jobs.epoch_coverage(merged, 0)
        self.assertEqual(len(kept), 2, kept)  # the first round and the one after the kill
        twice = {i: n for i, n in counts.items() if n != 1}
        self.assertEqual(twice, {}, "samples trained on more than once")
        self.assertEqual(sorted(counts), list(range(SAMPLES)), "samples never trained on")

    def test_a_killed_worker_on_one_node_is_healed_from_its_peer(self):
        cluster = harness.Cluster(1)
        self.addCleanup(cluster.close)
        host = cluster.hosts[0]
        # The reference: the same job, undisturbed.
        proc, metrics, _, folder = self.job(host, "reference", ["--standalone", "--recovery", "in_place"])
        self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        reference = jobs.read_metrics(metrics)

        proc, metrics, samples, folder = self.job(host, "killed", ["--standalone", "--recovery", "in_place"])
        harness.wait_for(lambda: sample_lines(samples) >= 40, 300, "20 steps of both ranks")
        events = lambda: list(launcher_events(os.path.join(folder, "logs")).values())[0]
        first = named(events(), "workers_started")[0]["pids"]
        os.kill(first[1], signal.SIGKILL)
        self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        ev = events()
        started = [e["pids"] for e in named(ev, "workers_started")]
        self.assertEqual(len(started), 2, ev)
        self.assertEqual(started[1][0], first[0], "the survivor kept its process")
        self.assertNotEqual(started[1][1], first[1])
        held = named(ev, "survivors_held")
        self.assertEqual([h["ranks"] for h in held], [[0]], ev)
        recovered = named(ev, "recovered")
        self.assertEqual([(r["path"], r["cause"]) for r in recovered], [("in_place", "worker_failed")], ev)
        phases = ["detected_to_aborted_s", "aborted_to_round_formed_s", "round_formed_to_started_s",
                  "started_to_comm_ready_s", "comm_ready_to_state_received_s", "state_received_to_next_step_s"]
        self.assertAlmostEqual(sum(recovered[0][p] for p in phases), recovered[0]["total_s"], places=5)
        # The new rank received the state from the survivor, not a file.
        healed = named(ev, "worker_recovered")
        self.assertTrue(healed and all(h["state_from"] == "rank 0" for h in healed), ev)
        m = jobs.read_metrics(metrics)
        self.assertEqual((m["world_size"], m["recoveries"], m["restart_count"]), (2, 1, 0))
        self.assertEqual(m["replicas_differing"], 0)
        self.assertAlmostEqual(m["test_accuracy"], reference["test_accuracy"], delta=TOLERANCE)
        self.assert_every_sample_once(samples)
        self.assertEqual(jobs.children(proc.pid), [])

    def test_a_killed_worker_on_the_second_host_leaves_both_hosts_survivors_running(self):
        ok, why = harness.netns_available()
        if not ok:
            self.skipTest("needs network namespaces (hosts with their own addresses and names): " + why)
        cluster = harness.Cluster(2, use_netns=True)
        self.addCleanup(cluster.close)
        job = ["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "%s:%d" % (cluster.hosts[0].name, PORT),
               "--rdzv_id", "inplace", "--recovery", "in_place"]
        nodes = [self.job(h, "node%d" % i, job) for i, h in enumerate(cluster.hosts)]
        samples = [n[2] for n in nodes]
        harness.wait_for(lambda: sum(sample_lines(s) for s in samples) >= 40, 300, "10 steps of every rank")

        def events(i):
            return list(launcher_events(os.path.join(nodes[i][3], "logs")).values())[0]
        first = [named(events(i), "workers_started")[0]["pids"] for i in range(2)]
        os.kill(first[1][1], signal.SIGKILL)
        for proc, _, _, folder in nodes:
            self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        ev0, ev1 = events(0), events(1)
        # Host 0 kept both its workers, host 1 its local rank 0.
        self.assertEqual({tuple(e["pids"]) for e in named(ev0, "workers_started")}, {tuple(first[0])}, ev0)
        last1 = named(ev1, "workers_started")[-1]["pids"]
        self.assertEqual(last1[0], first[1][0], ev1)
        self.assertNotEqual(last1[1], first[1][1], ev1)
        self.assertEqual([r["path"] for r in named(ev0, "recovered")], ["in_place"], ev0)
        self.assertEqual([r["path"] for r in named(ev1, "recovered")], ["in_place"], ev1)
        metrics = [jobs.read_metrics(n[1]) for n in nodes if os.path.exists(n[1])]
        self.assertEqual(len(metrics), 1)
        self.assertEqual((metrics[0]["world_size"], metrics[0]["recoveries"]), (4, 1))
        self.assertEqual(metrics[0]["replicas_differing"], 0)
        self.assert_every_sample_once(*samples)


if __name__ == "__main__":
    unittest.main()
