"""Warm spares of `train` (launcher/agent/warm_pool.h): once the group is
running, the launcher keeps one spare per local rank that has loaded
LibTorch and the data set; a spare killed while it waits is replaced; at a
restart the spares become the workers (no exec), the job resumes from its
checkpoint and finishes as it would have; nothing is left behind.
--warm_spares false restarts cold."""
import os
import random
import signal
import subprocess
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "16384", "--checkpoint_every", "8", "--progress", "lines"]


class WarmSpareTest(unittest.TestCase):
    def start(self, *launcher_args):
        self.work = jobs.work_dir(self, "cpt-warm-")
        self.logs = os.path.join(self.work, "logs")
        self.ckpt = os.path.join(self.work, "ckpt")
        self.metrics = os.path.join(self.work, "metrics.json")
        self.run_id = "warm-%06x" % random.getrandbits(24)
        self.log_path = os.path.join(self.work, "job.log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [harness.binary(jobs.LAUNCHER), "--standalone", "--nproc_per_node=2", "--fake_gpus=2",
             "--rdzv_id", self.run_id, "--max_restarts=2", "--monitor_interval=0.1", "--log_dir", self.logs]
            + list(launcher_args)
            + [harness.binary(jobs.TRAIN), "--checkpoint_dir", self.ckpt, "--metrics_json", self.metrics] + TRAIN,
            stdout=log, stderr=subprocess.STDOUT)
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

    def test_a_killed_spare_is_replaced_and_spares_become_the_workers(self):
        self.start()
        ready = harness.wait_for(lambda: len(self.events("spare_ready")) == 2 and self.events("spare_ready"),
                                 120, "two ready spares")
        by_rank = {e["local_rank"]: e["pid"] for e in ready}
        # A spare killed while it waits: replaced at once, and ready again.
        os.kill(by_rank[1], signal.SIGKILL)
        lost = harness.wait_for(lambda: self.events("spare_lost", local_rank=1), 60, "the lost spare")
        self.assertEqual(lost[0]["pid"], by_rank[1])
        again = harness.wait_for(lambda: self.events("spare_ready", local_rank=1)[1:], 120, "a new spare")
        by_rank[1] = again[0]["pid"]
        self.assertNotEqual(by_rank[1], lost[0]["pid"])
        # A worker killed: the spares become the next group's workers.
        jobs.wait_checkpoint(self.ckpt)
        victim = harness.wait_for(lambda: jobs.current_workers(jobs.events_in(self.logs), self.proc.pid), 30,
                                  "the workers")[1]
        os.kill(victim, signal.SIGKILL)
        m = self.finish()
        warm = self.events("warm_started")
        self.assertEqual(sorted((e["local_rank"], e["pid"], e["from"]) for e in warm),
                         [(0, by_rank[0], "spare"), (1, by_rank[1], "spare")])
        started = self.events("workers_started")
        self.assertEqual([len(e["pids"]) for e in started], [2, 2])
        self.assertEqual(started[1]["pids"], [by_rank[0], by_rank[1]])
        self.assertEqual(self.events("warm_fallback"), [])
        self.assertGreater(m["resumed_from_step"], 0)
        self.assertEqual(m["restart_count"], 1)
        # The restarted rank 0 says where its start-up went: nothing before
        # main, no data loading (the spare had done both).
        self.assertRegex(self.text(), r"started in [\d.]+ s \(before main 0\.00 s, data 0\.00 s")
        done = self.events("restart_completed")
        self.assertEqual(len(done), 1)
        # And the new group, once running, got its own spares.
        after = [e for e in self.events("spare_started") if e["time"] >= done[0]["time"]]
        self.assertEqual(sorted(e["local_rank"] for e in after), [0, 1], self.events("spare_started"))

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
