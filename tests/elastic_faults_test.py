"""Scenarios 5 and 6: faults the job must ride out.

5. A worker hangs (SIGSTOP): --worker_timeout catches the silence, the
   group restarts and resumes from the checkpoint. With default settings
   (the adaptive deadline) on the second of two hosts, the launcher there
   names it (rank, host, process state) within 15 s, and the first host's
   launcher, whose workers only wait for it, accuses nobody. A worker whose
   training thread alone stops (its heartbeats go on) never issues the
   collective its peer waits in: its flight recorder is behind, and its
   launcher names it at its deadline.
   A node whose --health_check fails stays out of the job and says why;
   the other trains alone. A node whose workers keep failing is kept out
   (quarantined) by the rendezvous after its third, and listed by status;
   the other, whose workers only lost their peer, trains on alone.
   A job whose every attempt fails before the same step (train
   --fail_at_step) gives up after --failures_without_progress failures in
   a row with exit code 78, before --max_restarts runs out. Status shows a
   node's latest hang while the job goes on.
6. The rendezvous server is killed (SIGKILL) and started again on the same
   port during a 2-node job: training goes on without a restart, the agents
   re-register their round, and a worker failure after that still recovers
   through the new server.
"""
import ctypes
import os
import random
import signal
import subprocess
import time
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


def interrupt_thread(tid):
    """Stops one thread (a process's main thread: tid = pid) and no other:
    ptrace's seize and interrupt, as a debugger does. The thread stays
    stopped while this process lives, or until its process is killed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    for request in (0x4206, 0x4207):  # PTRACE_SEIZE, PTRACE_INTERRUPT
        if libc.ptrace(request, tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), "ptrace(%#x, %d)" % (request, tid))


class FaultsTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(3)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-faults-")
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work)
        self.run_id = "faults-%06x" % random.getrandbits(24)
        self.ckpt = os.path.join(self.work, "ckpt")

    def test_hung_worker_is_restarted(self):
        node = jobs.Node(self.cluster.hosts[1], self.work, "node", self.server.endpoint, "1:1",
                         run_id=self.run_id, train_args=TRAIN,
                         launcher_args=["--worker_timeout", "2"] + jobs.fast_rdzv_conf())
        jobs.wait_checkpoint(self.ckpt)
        victim = harness.wait_for(node.worker_pids, 30, "the workers")[1]
        os.kill(victim, signal.SIGSTOP)
        self.assertEqual(node.wait(600), 0, node.text()[-4000:])
        events = node.events()
        self.assertIn("hung", [e.get("status") for e in events if e["event"] == "worker_failed"], events)
        self.assertEqual([(e["cause"], e["counted"]) for e in events if e["event"] == "restart"],
                         [("worker_failed", 1)], events)
        m = jobs.read_metrics(node.metrics)
        self.assertGreater(m["resumed_from_step"], 0)
        self.assertEqual(m["restart_count"], 1)
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_a_stopped_worker_on_the_second_host_is_named_by_default(self):
        # As a user types it: no --worker_timeout, train's default heartbeats.
        train = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "8"]
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "2:2",
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf())
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "2:2",
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf())
        jobs.wait_checkpoint(self.ckpt)
        victim = harness.wait_for(b.worker_pids, 30, "node B's workers")[1]
        with open("/proc/%d/environ" % victim, "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        rank = int(env[b"RANK"])
        os.kill(victim, signal.SIGSTOP)
        # `status --json` while the job goes on: node B's latest hang, as
        # its keep-alives carry it (polled until it shows or B ends).
        shown = harness.wait_for(lambda: self.hang_in_status() or b.proc.poll() is not None, 120,
                                 "the hang in status, or node B's end")
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertIsInstance(shown, dict, "the job ended before status showed the hang")
        self.assertEqual(shown["culprit_ranks"], [rank], shown)
        self.assertEqual(shown["culprit_hosts"], [self.cluster.hosts[2].name], shown)
        self.assertIn("rank %d: stopped (T)" % rank, shown["process_states"])
        hangs = jobs.named(b.events(), "hang_detected")
        self.assertEqual(len(hangs), 1, b.events())
        hang = hangs[0]
        self.assertEqual(hang["culprit_ranks"], [rank], hang)
        self.assertEqual(hang["culprit_hosts"], [self.cluster.hosts[2].name], hang)
        self.assertEqual(hang["waiting_ranks"], [], hang)
        self.assertIn("rank %d: stopped (T)" % rank, hang["process_states"])
        # The rule's figures: a stopped process gets the stopped floor (2 s)
        # or 10 x its step plus two heartbeats, not the floor (10 s); the
        # time since the last step seen (a heartbeat's period after the
        # stop at most, plus the looks).
        self.assertGreaterEqual(hang["deadline_s"], 2.0, hang)
        self.assertLess(hang["deadline_s"], 10.0, hang)
        self.assertLess(hang["waited_s"], 15.0, hang)
        self.assertEqual(jobs.named(a.events(), "hang_detected"), [], "node A's workers only waited")
        self.assertIn("hung", [e.get("status") for e in b.events() if e["event"] == "worker_failed"])
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_a_rank_that_never_issues_the_collective_its_peer_waits_in_is_named(self):
        # The training thread of node B's worker stops (ptrace's interrupt of
        # that one thread: as a stuck data loader would stop it) while its
        # heartbeat thread goes on, so nothing looks frozen or silent. Its
        # flight recorder is behind node A's worker's, which waits in the
        # next collective: B's launcher names it at its deadline, A's
        # launcher, whose worker only waits, accuses nobody.
        train = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "8"]
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf())
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "2:2", nproc=1,
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf())
        jobs.wait_checkpoint(self.ckpt)
        victim = harness.wait_for(b.worker_pids, 30, "node B's worker")[0]
        interrupt_thread(victim)
        stopped_at = time.time()
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        hangs = jobs.named(b.events(), "hang_detected")
        self.assertEqual(len(hangs), 1, b.events())
        hang = hangs[0]
        self.assertEqual(hang["culprit_hosts"], [self.cluster.hosts[2].name], hang)
        self.assertEqual(len(hang["culprit_ranks"]), 1, hang)
        self.assertGreater(hang["collective_seq"], 0, hang)
        self.assertIn("traced (t)", hang["process_states"])
        self.assertLess(hang["time"] - stopped_at, 20.0, "named at its own deadline, before twice that")
        self.assertIn("never issued collective %d that its peers wait in" % hang["collective_seq"], b.text())
        self.assertEqual(jobs.named(a.events(), "hang_detected"), [], "node A's worker only waited")
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_a_node_failing_its_health_check_stays_out_and_says_why(self):
        check = "echo checking GPUs; echo 'GPU 0: 3 uncorrectable ECC errors' >&2; exit 3"
        train = ["--epochs", "1", "--limit", "8192"]
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "1:2",
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf())
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "1:2",
                      run_id=self.run_id, train_args=train,
                      launcher_args=jobs.fast_rdzv_conf() + ["--health_check", check])
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(jobs.read_metrics(a.metrics)["world_size"], 2, "A trained alone")
        failed = harness.wait_for(lambda: jobs.named(b.events_so_far(), "health_check_failed"), 60,
                                  "B's failed health check")
        self.assertEqual(failed[0]["status"], "exit code 3", failed)
        self.assertEqual(failed[0]["reason"], "GPU 0: 3 uncorrectable ECC errors", failed)
        self.assertEqual(b.joined(), [], "B never joined")
        self.assertIn("this node stays out: health check failed (exit code 3): GPU 0: 3 uncorrectable ECC errors",
                      b.text())
        b.proc.send_signal(signal.SIGTERM)
        self.assertEqual(b.wait(60), 128 + signal.SIGTERM, b.text()[-3000:])
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_a_flapping_node_is_quarantined_and_the_job_goes_on_without_it(self):
        # Node B's workers die three times (kill -9, as a failing GPU would
        # take them): its third failure keeps its host out of the run for the
        # cool-down (quarantine_after 3, the default), and node A, whose
        # workers only lost their peer, trains on alone.
        train = ["--epochs", "1", "--checkpoint_every", "8"]
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "1:2",
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf(), max_restarts=5)
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "1:2",
                      run_id=self.run_id, train_args=train, launcher_args=jobs.fast_rdzv_conf(), max_restarts=5)
        def workers_of_a_round_with_both(kill):
            joined = b.joined()
            if len(b.joined(group_world_size=2)) <= kill or joined[-1]["group_world_size"] != 2:
                return None
            return b.worker_pids()

        for kill in range(3):
            victims = harness.wait_for(lambda: workers_of_a_round_with_both(kill), 120,
                                       "node B's workers in a round with A (kill %d)" % (kill + 1))
            os.kill(victims[0], signal.SIGKILL)
            harness.wait_for(lambda: len(jobs.named(b.events_so_far(), "worker_failed")) > kill, 60,
                             "node B to see its failure %d" % (kill + 1))
        kept_out = harness.wait_for(lambda: jobs.named(b.events_so_far(), "quarantined"), 60, "B kept out")
        self.assertIn("host %s is kept out of the run" % self.cluster.hosts[2].addr, kept_out[0]["detail"])
        self.assertIn("failed first in 3 rounds", kept_out[0]["detail"])
        table = harness.wait_for(lambda: (self.status() or "") if "QUARANTINED_HOST" in (self.status() or "")
                                 else None, 30, "status to list the quarantine")
        section = table[table.index("QUARANTINED_HOST"):].split("\n\n")[0]
        self.assertEqual([r.split()[:2] for r in section.splitlines()[1:]], [[self.cluster.hosts[2].addr, "3"]],
                         table)
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(jobs.read_metrics(a.metrics)["world_size"], 2, "A finished alone")
        events = b.events()
        first_kept_out = [e["event"] for e in events].index("quarantined")
        self.assertEqual(jobs.named(events[first_kept_out:], "round_joined"), [], "B was not admitted again")
        self.assertIn("the rendezvous keeps this node out of run", b.text())
        b.proc.send_signal(signal.SIGTERM)
        self.assertEqual(b.wait(60), 128 + signal.SIGTERM, b.text()[-3000:])
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_a_job_whose_failures_never_pass_its_best_step_exits_78(self):
        # Every attempt fails before global step 40 (a batch that always
        # breaks the job), resuming from a checkpoint before it: after
        # --failures_without_progress (its default, 5) failures in a row
        # that pass no step, the launcher gives up with 78 ("do not
        # requeue"), long before --max_restarts runs out.
        node = jobs.Node(self.cluster.hosts[1], self.work, "node", self.server.endpoint, "1:1",
                         run_id=self.run_id, max_restarts=30,
                         train_args=TRAIN + ["--fail_at_step", "40"])
        self.assertEqual(node.wait(600), 78, node.text()[-4000:])
        events = node.events()
        gave_up = jobs.named(events, "no_progress")
        self.assertEqual(len(gave_up), 1, events)
        self.assertEqual(gave_up[0]["failures_in_a_row"], 5, gave_up)
        self.assertEqual(gave_up[0]["exit_code"], 78, gave_up)
        self.assertLess(gave_up[0]["best_step"], 40, gave_up)
        restarts = jobs.named(events, "restart")
        self.assertLess(len(restarts), 30, "it stopped before --max_restarts ran out")
        self.assertIn("fault injection: global step 40 fails in every attempt", node.text())
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def hang_in_status(self):
        return jobs.node_fault(jobs.status_json(self.cluster.hosts[1], self.server.endpoint, self.run_id),
                               "last_hang")

    def status(self):
        r = subprocess.run(self.cluster.hosts[1].argv(
            [harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", self.server.endpoint,
             "--rdzv_id", self.run_id]), capture_output=True, text=True, timeout=60)
        return r.stdout if r.returncode == 0 else None

    def test_server_restart_mid_training(self):
        conf = jobs.fast_rdzv_conf()
        a = jobs.Node(self.cluster.hosts[1], self.work, "nodeA", self.server.endpoint, "2:2",
                      run_id=self.run_id, launcher_args=conf, train_args=TRAIN)
        b = jobs.Node(self.cluster.hosts[2], self.work, "nodeB", self.server.endpoint, "2:2",
                      run_id=self.run_id, launcher_args=conf, train_args=TRAIN)
        jobs.wait_checkpoint(self.ckpt)
        port = self.server.port
        self.server.kill()
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work, port=port)
        # The agents re-register their round with the new server.
        table = harness.wait_for(self.status, 60, "the restarted server to know the run again")
        self.assertIn(self.run_id, table)
        self.assertEqual(jobs.named(a.events() + b.events(), "round_ended", round=1), [],
                         "a server restart alone must not restart the workers")
        victim = harness.wait_for(b.worker_pids, 30, "node B's workers")[0]
        os.kill(victim, signal.SIGKILL)
        self.assertEqual(a.wait(600), 0, a.text()[-4000:])
        self.assertEqual(b.wait(600), 0, b.text()[-4000:])
        self.assertTrue(jobs.named(b.events(), "restart", cause="worker_failed", counted=1, restart_count=1,
                                   max_restarts=3), b.events())
        self.assertTrue(a.joined(round=2, group_world_size=2), a.events())
        paths = [n.metrics for n in (a, b) if os.path.exists(n.metrics)]
        m = jobs.read_metrics(paths[0])
        self.assertEqual(m["world_size"], 4)
        self.assertGreater(m["resumed_from_step"], 0)
        self.assertEqual(jobs.job_leftovers(self.run_id), [])


if __name__ == "__main__":
    harness.main()
