"""In-place recovery (`--recovery in_place`, docs/DESIGN.md): a worker
killed with SIGKILL costs the job its interrupted step, not a restart. The
other workers keep their processes (their pids are the same to the end),
only the lost local rank starts again, it receives the model, the optimizer
and the position from a survivor (no --checkpoint_dir at all), and the rest
of the epoch is re-sharded so that every sample is trained on exactly once.
Where no warm spare is ready (the first failure of a job on this machine),
the node runs short meanwhile: the survivors go on at once at the smaller
world, and the node grows back at a step boundary when the spare is ready
(both kinds of run are checked, whichever the machine gives).

1. One node, 2 workers on fake GPUs, launched as a user types it
   (`--standalone`); an undisturbed run of the same job is the accuracy
   reference. The same on the CPU backends (shared memory, Gloo).
2. Two hosts (network namespaces with their own hostnames), 2 workers each,
   the endpoint by host 0's name, no --local_addr; a worker on host 1 is
   killed: both nodes' survivors stay, a new round forms, the job finishes.
3. A worker stopped with SIGSTOP: found hung, killed, recovered in place.
4. Ten kills in a row, each after the previous recovery trained; a
   replacement killed in the middle of its state transfer.
5. `--nnodes 1:2`: host 1 lost whole (launcher and workers SIGKILLed), host
   0's workers go on at world 2; and host 1 joining a running host 0: host
   0's workers go on at world 4 without restarting.
"""
import collections
import json
import os
import signal
import unittest

from tests import harness
from tests import jobs

SAMPLES = 16384
TRAIN = ["--limit", str(SAMPLES), "--progress", "lines", "--heartbeat_interval", "0.2"]
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
    """The event logs of every launcher under --log_dir, by folder (none
    before the launcher has made its folder)."""
    out = {}
    if not os.path.isdir(log_root):
        return out
    for name in sorted(os.listdir(log_root)):
        path = os.path.join(log_root, name, "events.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                out[name] = [json.loads(line) for line in f if line.endswith("\n")]
    return out


def node_events(folder):
    """The events of the one launcher whose --log_dir is under `folder`
    (see job()); [] before it has written any."""
    return next(iter(launcher_events(os.path.join(folder, "logs")).values()), [])


def named(events, name):
    return [e for e in events if e["event"] == name]


class InPlaceRecoveryTest(unittest.TestCase):
    def setUp(self):
        self.work = jobs.work_dir(self, "cpt-inplace-")

    def job(self, host, name, launcher_args, extra=(), epochs=1):
        """One launcher of a job on `host`: its process, metrics file, sample log folder."""
        folder = os.path.join(self.work, name)
        os.makedirs(folder, exist_ok=True)
        metrics = os.path.join(self.work, name + "-metrics.json")
        samples = os.path.join(self.work, name + "-samples")
        # The scenario's own launcher flags last: they win over these.
        argv = [harness.binary(jobs.LAUNCHER), "--nproc_per_node", "2", "--fake_gpus", "2", "--max_restarts", "3",
                "--log_dir", os.path.join(folder, "logs"), "--tee", "3"] + launcher_args + [
            harness.binary(jobs.TRAIN), "--metrics_json", metrics, "--sample_log", samples,
            "--epochs", str(epochs)] + TRAIN + list(extra)
        proc = host.spawn(argv, log=os.path.join(folder, "launcher.log"))
        return proc, metrics, samples, folder

    def text(self, folder):
        with open(os.path.join(folder, "launcher.log"), errors="replace") as f:
            return f.read()[-6000:]

    def assert_every_sample_once(self, *sample_folders, rounds=2, epochs=1):
        """Every epoch trained on each sample exactly once, over `rounds`
        rounds that trained (the first and one per recovery)."""
        merged = os.path.join(self.work, "samples-merged-%d" % len(os.listdir(self.work)))
        os.makedirs(merged)
        for folder in sample_folders:
            for name in os.listdir(folder):
                os.link(os.path.join(folder, name), os.path.join(merged, name))
        trained = set()
        for epoch in range(epochs):
            counts, kept = jobs.epoch_coverage(merged, epoch)
            trained.update(r for r, _, _, batches in kept if batches)
            twice = {i: n for i, n in counts.items() if n != 1}
            self.assertEqual(twice, {}, "epoch %d: samples trained on more than once" % epoch)
            self.assertEqual(sorted(counts), list(range(SAMPLES)), "epoch %d: samples never trained on" % epoch)
        self.assertEqual(len(trained), rounds, trained)

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
        events = lambda: node_events(folder)
        first = named(events(), "workers_started")[0]["pids"]
        os.kill(first[1], signal.SIGKILL)
        self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        ev = events()
        rounds = self.assert_healed(ev, first)
        self.assertEqual({tuple(h["ranks"]) for h in named(ev, "survivors_held")}, {(0,)}, ev)
        recovered = named(ev, "recovered")
        phases = ["detected_to_aborted_s", "aborted_to_round_formed_s", "round_formed_to_started_s",
                  "started_to_comm_ready_s", "comm_ready_to_state_received_s", "state_received_to_next_step_s"]
        for r in recovered:
            self.assertAlmostEqual(sum(r[p] for p in phases), r["total_s"], places=5)
        # The new rank received the state from the survivor, not a file.
        healed = named(ev, "worker_recovered")
        self.assertTrue(healed and all(h["state_from"] == "rank 0" for h in healed), ev)
        m = jobs.read_metrics(metrics)
        self.assertEqual((m["world_size"], m["recoveries"], m["restart_count"]), (2, rounds - 1, 0))
        self.assertEqual(m["replicas_differing"], 0)
        self.assertAlmostEqual(m["test_accuracy"], reference["test_accuracy"], delta=TOLERANCE)
        self.assert_every_sample_once(samples, rounds=rounds)
        self.assertEqual(jobs.children(proc.pid), [])

    def assert_healed(self, ev, first, kills=1, one_node=True):
        """Local rank 0 kept its process through every round and local rank 1
        is a new one at the end. Each kill is one in-place recovery; where
        no spare was ready the node ran short meanwhile (the survivor alone:
        a held event naming the empty slot, a round of one worker) and grew
        back at a step boundary once the spare was (on one node the
        survivor alone is told, so it leaves at its boundary; across nodes a
        peer that left at its boundary one step earlier fails the survivor's
        collective instead). Returns the rounds."""
        started = [e["pids"] for e in named(ev, "workers_started")]
        self.assertEqual({p[0] for p in started}, {first[0]}, "the survivor kept its process: %s" % ev)
        self.assertEqual(len(started[-1]), 2, ev)
        self.assertNotEqual(started[-1][1], first[1], ev)
        held = named(ev, "survivors_held")
        short = [h for h in held if h["vacant"]]
        grown = [h for h in held if "is ready: the node grows back" in h["reason"]]
        self.assertEqual(len(grown), len(short), ev)
        self.assertTrue(all(h["vacant"] == [1] for h in short), ev)
        self.assertEqual(len(started), 1 + kills + len(short), ev)
        self.assertEqual(sum(1 for p in started if len(p) == 1), len(short), ev)
        recovered = named(ev, "recovered")
        self.assertEqual(sorted((r["path"], r["cause"]) for r in recovered),
                         sorted([("in_place", "worker_failed")] * kills + [("in_place", "membership")] * len(short)),
                         ev)
        # Growing back lost nothing: the survivor left at a step boundary.
        for h in grown if one_node else ():
            boundary = [e for e in named(ev, "worker_recovering") if e["time"] > h["time"]][:1]
            self.assertTrue(boundary and "at the step boundary" in boundary[0]["reason"], ev)
        return len(started)

    def one_node_kill(self, name, extra=(), kill=signal.SIGKILL):
        """One node of 2 workers; `kill` sent to local rank 1 after 20 steps;
        returns (its events, metrics, the first pids, sample folder)."""
        cluster = harness.Cluster(1)
        self.addCleanup(cluster.close)
        proc, metrics, samples, folder = self.job(cluster.hosts[0], name,
                                                  ["--standalone", "--recovery", "in_place"], extra)
        harness.wait_for(lambda: sample_lines(samples) >= 40, 300, "20 steps of both ranks")
        events = lambda: node_events(folder)
        first = named(events(), "workers_started")[0]["pids"]
        os.kill(first[1], kill)
        self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        self.assertEqual(jobs.children(proc.pid), [])
        return events(), jobs.read_metrics(metrics), first, samples

    def test_the_cpu_backends_recover_in_place(self):
        for backend in ("shm", "gloo"):
            with self.subTest(backend=backend):
                ev, m, first, samples = self.one_node_kill("backend-" + backend,
                                                           ["--backend", backend])
                rounds = self.assert_healed(ev, first)
                self.assertEqual((m["backend"], m["recoveries"]), (backend, rounds - 1))
                self.assertEqual(m["replicas_differing"], 0)
                self.assert_every_sample_once(samples, rounds=rounds)

    def test_a_stopped_worker_is_found_hung_and_recovered_in_place(self):
        ev, m, first, samples = self.one_node_kill("stopped", kill=signal.SIGSTOP)
        hangs = named(ev, "hang_detected")
        self.assertEqual([h["culprit_ranks"] for h in hangs], [[1]], ev)
        rounds = self.assert_healed(ev, first)
        self.assertEqual(m["recoveries"], rounds - 1)
        self.assert_every_sample_once(samples, rounds=rounds)

    def test_a_replacement_killed_during_the_state_transfer_is_recovered_again(self):
        # The first replacement (restart count 1) kills itself after it has
        # received the position and before the optimizer state and the
        # parameters: the survivor's broadcast fails, the launcher says the
        # recovery was interrupted, and recovers again in place (the
        # survivor still holds its state; no checkpoint folder anyway).
        ev, m, first, samples = self.one_node_kill("transfer", ["--die_in_state_transfer_at_restart", "1"])
        interrupted = named(ev, "recovery_interrupted")
        self.assertEqual(len(interrupted), 1, ev)
        self.assertIn("SIGKILL", interrupted[0]["reason"])
        started = [e["pids"] for e in named(ev, "workers_started")]
        self.assertEqual({p[0] for p in started}, {first[0]}, "the survivor kept its process: %s" % ev)
        self.assertEqual(len(started[-1]), 2, ev)
        self.assertEqual({r["path"] for r in named(ev, "recovered")}, {"in_place"}, ev)
        self.assertEqual([r["cause"] for r in named(ev, "restart")].count("worker_failed"), 2, ev)
        healed = named(ev, "worker_recovered")
        self.assertTrue(healed and all(h["state_from"] == "rank 0" for h in healed), ev)
        self.assertEqual((m["world_size"], m["replicas_differing"]), (2, 0))
        # Every round trained but the one whose transfer broke off.
        self.assert_every_sample_once(samples, rounds=len(started) - 1)

    def test_ten_kills_in_a_row(self):
        cluster = harness.Cluster(1)
        self.addCleanup(cluster.close)
        proc, metrics, samples, folder = self.job(
            cluster.hosts[0], "ten", ["--standalone", "--recovery", "in_place", "--max_restarts", "10"],
            epochs=4)
        events = lambda: node_events(folder)
        harness.wait_for(lambda: sample_lines(samples) >= 20, 300, "10 steps of both ranks")
        first = named(events(), "workers_started")[0]["pids"]
        def whole_and_recovered(rounds_before):
            # A round after the last kill, of both workers, that every
            # worker has made a step in (its recovered event).
            ev = events()
            started = named(ev, "workers_started")
            return (len(started) > rounds_before and len(started[-1]["pids"]) == 2 and
                    len(named(ev, "recovered")) == len(started) - 1)
        rounds_before = 0
        for kill in range(10):
            # The newest local rank 1, once the job trained after the last
            # recovery, whole again.
            harness.wait_for(lambda: whole_and_recovered(rounds_before) or proc.poll() is not None, 300,
                             "recovery %d" % kill)
            self.assertIsNone(proc.poll(), "the job ended after %d kills:\n%s" % (kill, self.text(folder)))
            started = named(events(), "workers_started")
            rounds_before = len(started)
            os.kill(started[-1]["pids"][1], signal.SIGKILL)
        self.assertEqual(proc.wait(timeout=900), 0, self.text(folder))
        ev = events()
        rounds = self.assert_healed(ev, first, kills=10)
        m = jobs.read_metrics(metrics)
        self.assertEqual((m["recoveries"], m["restart_count"], m["replicas_differing"]), (rounds - 1, 0, 0))
        self.assert_every_sample_once(samples, rounds=rounds, epochs=4)

    def two_hosts(self, extra_job=()):
        ok, why = harness.netns_available()
        if not ok:
            self.skipTest("needs network namespaces (hosts with their own addresses and names): " + why)
        cluster = harness.Cluster(2, use_netns=True)
        self.addCleanup(cluster.close)
        job = ["--rdzv_backend", "c10d", "--rdzv_endpoint", "%s:%d" % (cluster.hosts[0].name, PORT),
               "--rdzv_id", "inplace", "--recovery", "in_place"] + list(extra_job)
        return cluster, job

    def test_a_lost_node_leaves_the_other_going_on_at_the_smaller_world(self):
        cluster, job = self.two_hosts(["--nnodes", "1:2"] + jobs.fast_rdzv_conf())
        nodes = [self.job(h, "lost%d" % i, job, epochs=2) for i, h in enumerate(cluster.hosts)]

        def events(i):
            return node_events(nodes[i][3])
        harness.wait_for(lambda: all(named(events(i), "round_joined") for i in range(2)) and
                         named(events(0), "round_joined")[-1]["world_size"] == 4, 300, "a round of both hosts")
        harness.wait_for(lambda: sum(sample_lines(n[2]) for n in nodes) >= 40, 300, "10 steps of every rank")
        first = named(events(0), "workers_started")[-1]["pids"]
        # Host 1 dies whole: its launcher and its workers.
        victims = [nodes[1][0].pid] + named(events(1), "workers_started")[-1]["pids"]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        nodes[1][0].wait(timeout=60)
        self.assertEqual(nodes[0][0].wait(timeout=600), 0, self.text(nodes[0][3]))
        ev0 = events(0)
        self.assertEqual({tuple(e["pids"]) for e in named(ev0, "workers_started")}, {tuple(first)}, ev0)
        self.assertEqual([r["path"] for r in named(ev0, "recovered")], ["in_place"], ev0)
        self.assertEqual(named(ev0, "round_joined")[-1]["world_size"], 2, ev0)
        m = jobs.read_metrics(nodes[0][1])
        self.assertEqual((m["world_size"], m["recoveries"]), (2, 1))
        self.assert_every_sample_once(nodes[0][2], nodes[1][2], epochs=2)

    def test_a_node_joining_mid_epoch_restarts_nobody(self):
        cluster, job = self.two_hosts(["--nnodes", "1:2"] + jobs.fast_rdzv_conf())
        first_node = self.job(cluster.hosts[0], "join0", job, epochs=2)

        def events(node):
            return node_events(node[3])
        harness.wait_for(lambda: sample_lines(first_node[2]) >= 20, 300, "10 steps of host 0 alone")
        first = named(events(first_node), "workers_started")[0]["pids"]
        second_node = self.job(cluster.hosts[1], "join1", job, epochs=2)
        for node in (first_node, second_node):
            self.assertEqual(node[0].wait(timeout=600), 0, self.text(node[3]))
        ev0 = events(first_node)
        self.assertEqual({tuple(e["pids"]) for e in named(ev0, "workers_started")}, {tuple(first)}, ev0)
        self.assertEqual([r["path"] for r in named(ev0, "recovered")], ["in_place"], ev0)
        self.assertEqual([r["world_size"] for r in named(ev0, "round_joined")], [2, 4], ev0)
        self.assertEqual(named(ev0, "worker_failed"), [], ev0)
        metrics = [jobs.read_metrics(n[1]) for n in (first_node, second_node) if os.path.exists(n[1])]
        self.assertEqual(len(metrics), 1)
        self.assertEqual((metrics[0]["world_size"], metrics[0]["recoveries"]), (4, 1))
        self.assert_every_sample_once(first_node[2], second_node[2], epochs=2)

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
            return node_events(nodes[i][3])
        first = [named(events(i), "workers_started")[0]["pids"] for i in range(2)]
        os.kill(first[1][1], signal.SIGKILL)
        for proc, _, _, folder in nodes:
            self.assertEqual(proc.wait(timeout=600), 0, self.text(folder))
        ev0, ev1 = events(0), events(1)
        # Host 0 kept both its workers, host 1 its local rank 0.
        self.assertEqual({tuple(e["pids"]) for e in named(ev0, "workers_started")}, {tuple(first[0])}, ev0)
        rounds = self.assert_healed(ev1, first[1], one_node=False)
        self.assertEqual(len(named(ev0, "workers_started")), rounds, ev0)
        self.assertEqual({r["path"] for r in named(ev0, "recovered")}, {"in_place"}, ev0)
        metrics = [jobs.read_metrics(n[1]) for n in nodes if os.path.exists(n[1])]
        self.assertEqual(len(metrics), 1)
        self.assertEqual((metrics[0]["world_size"], metrics[0]["recoveries"]), (4, rounds - 1))
        self.assertEqual(metrics[0]["replicas_differing"], 0)
        self.assert_every_sample_once(*samples, rounds=rounds)


if __name__ == "__main__":
    unittest.main()
