"""Warm spares of `train` (launcher/agent/warm_pool.h): once the group is
running, the launcher keeps one spare per local rank that loads LibTorch
and the data set, at SCHED_IDLE until the job has restarted once; a spare
killed while it waits is replaced; at a restart the spares become the
workers (no exec), the job resumes from its checkpoint and finishes as it
would have; the next spares start at the workers' priority; nothing is
left behind.
--warm_spares false restarts cold."""
import os
import random
import signal
import subprocess
import threading
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "8", "--progress", "lines"]


def idle_priority_reversible():
    """Whether a thread of this process may go to SCHED_IDLE and back (as
    the launcher's own probe: where it may, spares wait at SCHED_IDLE)."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        return False
    result = []

    def probe():  # pid 0: this thread only
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            result.append(True)
        except PermissionError:
            result.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return result == [True]


def two_cpus():
    """This machine's first two CPUs, or None where it has fewer."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:2] if len(cpus) >= 2 else None


class WarmSpareTest(unittest.TestCase):
    def start(self, *launcher_args, nproc=2, cpus=None, train=TRAIN, env=None):
        """The job; `cpus`: the launcher's CPUs (and so the workers'), so
        that which spare rule applies does not depend on this machine."""
        self.work = jobs.work_dir(self, "cpt-warm-")
        self.logs = os.path.join(self.work, "logs")
        self.ckpt = os.path.join(self.work, "ckpt")
        self.metrics = os.path.join(self.work, "metrics.json")
        self.run_id = "warm-%06x" % random.getrandbits(24)
        self.log_path = os.path.join(self.work, "job.log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [harness.binary(jobs.LAUNCHER), "--standalone", "--nproc_per_node=%d" % nproc,
             "--fake_gpus=%d" % nproc, "--rdzv_id", self.run_id, "--max_restarts=2", "--monitor_interval=0.1",
             "--log_dir", self.logs]
            + list(launcher_args)
            + [harness.binary(jobs.TRAIN), "--checkpoint_dir", self.ckpt, "--metrics_json", self.metrics] + train,
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})),
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        log.close()
        self.addCleanup(lambda: self.proc.poll() is None and self.proc.kill())

    def events(self, name, **fields):
        return jobs.named(jobs.events_in(self.logs), name, **fields)

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def finish(self):
        try:
            code = self.proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            raise AssertionError("the job did not finish:\n" + self.text()[-5000:])
        self.assertEqual(code, 0, self.text()[-5000:])
        self.assertEqual(jobs.job_leftovers(self.run_id), [])
        return jobs.read_metrics(self.metrics)

    def kill_a_worker(self, index):
        victim = harness.wait_for(lambda: jobs.current_workers(jobs.events_in(self.logs), self.proc.pid), 30,
                                  "the workers")[index]
        os.kill(victim, signal.SIGKILL)

    def test_on_busy_cpus_spares_follow_the_first_restart_and_become_the_workers(self):
        cpus = two_cpus()
        if cpus is None:
            self.skipTest("needs 2 CPUs: 2 workers on 2 CPUs is the busy node")
        # 2 workers on 2 CPUs: no spare before the first restart (it execs).
        self.start(cpus=cpus, train=["--epochs", "1", "--limit", "32768", "--checkpoint_every", "8",
                                     "--progress", "lines"])
        jobs.wait_checkpoint(self.ckpt)
        self.assertEqual(self.events("spare_started"), [])
        self.kill_a_worker(0)
        ready = harness.wait_for(lambda: len(self.events("spare_ready")) == 2 and self.events("spare_ready"),
                                 120, "two ready spares after the first restart")
        self.assertEqual(self.events("warm_started"), [])
        self.assertEqual(len(self.events("restart_completed")), 1)
        # Once the job has restarted, spares start at the workers' priority.
        started = self.events("spare_started")
        self.assertEqual([e["priority"] for e in started], ["normal", "normal"])
        by_rank = {e["local_rank"]: e["pid"] for e in ready}
        self.assertEqual([os.sched_getscheduler(by_rank[r]) for r in (0, 1)], [os.SCHED_OTHER] * 2)
        # A spare killed while it waits: replaced at once, and ready again.
        os.kill(by_rank[1], signal.SIGKILL)
        lost = harness.wait_for(lambda: self.events("spare_lost", local_rank=1), 60, "the lost spare")
        self.assertEqual(lost[0]["pid"], by_rank[1])
        again = harness.wait_for(lambda: self.events("spare_ready", local_rank=1)[1:], 120, "a new spare")
        by_rank[1] = again[0]["pid"]
        self.assertNotEqual(by_rank[1], lost[0]["pid"])
        # A worker killed: the spares become the next group's workers.
        self.kill_a_worker(1)
        m = self.finish()
        warm = self.events("warm_started")
        self.assertEqual(sorted((e["local_rank"], e["pid"], e["from"]) for e in warm),
                         [(0, by_rank[0], "spare"), (1, by_rank[1], "spare")])
        groups = self.events("workers_started")
        self.assertEqual([len(e["pids"]) for e in groups], [2, 2, 2])
        self.assertEqual(groups[2]["pids"], [by_rank[0], by_rank[1]])
        self.assertEqual(self.events("warm_fallback"), [])
        self.assertGreater(m["resumed_from_step"], 0)
        self.assertEqual(m["restart_count"], 2)
        # The warm-started rank 0 says where its start-up went: nothing
        # before main, no data loading (the spare had done both).
        self.assertRegex(self.text(), r"started in [\d.]+ s \(before main 0\.00 s, data 0\.00 s")
        done = self.events("restart_completed")
        self.assertEqual(len(done), 2)
        # And the new group, once running, got its own spares.
        after = [e for e in self.events("spare_started") if e["time"] >= done[1]["time"]]
        self.assertEqual(sorted((e["local_rank"], e["priority"]) for e in after), [(0, "normal"), (1, "normal")],
                         self.events("spare_started"))

    def test_where_a_cpu_is_idle_the_spare_waits_at_sched_idle_and_becomes_the_worker(self):
        cpus = two_cpus()
        if cpus is None:
            self.skipTest("needs 2 CPUs: 1 worker on 2 CPUs is the node with a CPU to spare")
        # One worker of one thread (alone on its node a worker's LibTorch
        # would take every CPU, and the rule would start no spare).
        self.start(nproc=1, cpus=cpus, env={"OMP_NUM_THREADS": "1"})
        started = harness.wait_for(lambda: self.events("spare_started"), 120, "the spare")
        spare = started[0]["pid"]
        # SCHED_IDLE where it can be undone at the hand-over (as for root).
        idle = idle_priority_reversible()
        self.assertEqual(started[0]["priority"], "idle" if idle else "normal")
        self.assertEqual(os.sched_getscheduler(spare), os.SCHED_IDLE if idle else os.SCHED_OTHER)
        jobs.wait_checkpoint(self.ckpt)
        self.kill_a_worker(0)
        m = self.finish()
        self.assertEqual([(e["pid"], e["from"]) for e in self.events("warm_started")], [(spare, "spare")])
        self.assertEqual(self.events("warm_fallback"), [])
        self.assertEqual(m["restart_count"], 1)
        done = self.events("restart_completed")
        after = [e for e in self.events("spare_started") if e["time"] >= done[0]["time"]]
        self.assertEqual([e["priority"] for e in after], ["normal"], self.events("spare_started"))

    def test_without_warm_spares_restarts_exec(self):
        self.start("--warm_spares", "false")
        jobs.wait_checkpoint(self.ckpt)
        victim = harness.wait_for(lambda: jobs.current_workers(jobs.events_in(self.logs), self.proc.pid), 30,
                                  "the workers")[0]
        os.kill(victim, signal.SIGKILL)
        m = self.finish()
        self.assertEqual(self.events("spare_started"), [])
        self.assertEqual(self.events("warm_started"), [])
        self.assertGreater(m["resumed_from_step"], 0)

    def test_bad_warm_spares_value_names_the_flag(self):
        r = subprocess.run([harness.binary(jobs.LAUNCHER), "--warm_spares", "maybe", harness.binary(jobs.TRAIN)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--warm_spares", r.stderr)


if __name__ == "__main__":
    harness.main()
