"""`cpptorchrun status --json` and `--watch` against a real job (issue 19):
a rendezvous_server on host 0, one node of two ranks training on fake GPUs
on host 1, and status run from host 1 while it trains.

1. `--json` is one JSON object whose ranks show their steps.
2. `--watch` with stdout a file (not a terminal) prints timestamped blocks
   with no escape codes and exits 0 by itself once the job's node has left.
3. `--watch` on a pseudo-terminal redraws in place (cursor home, erase
   below) and exits 0 on SIGINT.
4. `--watch --json` after the job: one JSON line, exit 0 at once.
"""
import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import time
import unittest

from tests import harness
from tests import jobs

# Long enough (a few seconds of steps) for several refreshes at 0.2 s.
TRAIN = ["--epochs", "1", "--limit", "16384", "--heartbeat_interval", "0.2", "--progress", "lines"]
BLOCK = re.compile(r"^-- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ --$", re.M)


class StatusWatchTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(2)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-status-")
        self.server = jobs.RdzvServer(self.cluster.hosts[0], self.work)
        self.run_id = "status-%06x" % random.getrandbits(24)

    def status_argv(self, *more):
        return self.cluster.hosts[1].argv(
            [harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", self.server.endpoint,
             "--rdzv_id", self.run_id] + list(more))

    def status_json(self):
        r = subprocess.run(self.status_argv("--json"), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None
        self.assertEqual(r.stdout.count("\n"), 1, r.stdout)
        return json.loads(r.stdout)

    def test_json_and_watch_of_a_running_job(self):
        node = jobs.Node(self.cluster.hosts[1], self.work, "node", self.server.endpoint, "1", nproc=2,
                         run_id=self.run_id, launcher_args=jobs.fast_rdzv_conf(), train_args=TRAIN)

        def stepping():
            s = self.status_json()
            if s and len(s["ranks"]) == 2 and all(r["step"] > 0 for r in s["ranks"]):
                return s
            return None

        s = harness.wait_for(stepping, 120, "both ranks' steps in status --json")
        self.assertEqual(s["schema_version"], 1)
        self.assertEqual(s["run_id"], self.run_id)
        self.assertEqual(s["state"], "ACTIVE")
        self.assertEqual(s["round"], 1)
        self.assertEqual(len(s["nodes"]), 1, s)
        self.assertEqual(s["nodes"][0]["ranks"], [0, 1])
        self.assertEqual(s["nodes"][0]["restart_count"], 0)
        self.assertEqual(sorted(r["rank"] for r in s["ranks"]), [0, 1])
        for r in s["ranks"]:
            self.assertGreater(r["total_steps"], 0, r)
            self.assertLessEqual(r["step"], r["total_steps"], r)
            self.assertGreaterEqual(r["heartbeat_age_ms"], 0, r)
        self.assertGreater(s["server_store"]["budget"], 0)

        # Not a terminal: a file. It must end by itself when the job does.
        plain_path = os.path.join(self.work, "watch.out")
        with open(plain_path, "wb") as plain_out:
            plain = subprocess.Popen(self.status_argv("--watch", "--interval", "0.2"), stdout=plain_out,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.addCleanup(lambda: plain.poll() is None and plain.kill())

        # A terminal: a pseudo-terminal, read until two redraws, then SIGINT.
        tty_out = self.watch_on_a_terminal()
        self.assertGreaterEqual(tty_out.count(b"\x1b[H"), 2, tty_out[-2000:])
        self.assertIn(b"\x1b[J", tty_out)
        self.assertIn(b"\x1b[K\r\n", tty_out, "each line erased to its end")
        self.assertNotIn(b"\x1b[2J", tty_out)
        self.assertIn(b"RANK", tty_out)

        self.assertEqual(node.wait(600), 0, node.text()[-4000:])
        try:
            _, err = plain.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("status --watch did not end after the job did")
        with open(plain_path, "rb") as f:
            out = f.read().decode()
        self.assertEqual(plain.returncode, 0, err)
        self.assertNotIn("\x1b", out)
        self.assertGreater(len(BLOCK.findall(out)), 1, out[-3000:])
        self.assertIn("every node has left the run: it is over", out)

        # After the job: --watch --json prints the run once and ends.
        r = subprocess.run(self.status_argv("--watch", "--json", "--interval", "0.2"), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, r.stdout)
        last = json.loads(lines[0])
        self.assertEqual(last["nodes"], [])
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def watch_on_a_terminal(self):
        """Runs `status --watch` with a pseudo-terminal as its stdout until it
        has redrawn twice, stops it with SIGINT (it must exit 0), and returns
        all it wrote. Reads until it exits, so it never blocks on a full
        terminal; every wait is bounded."""
        master, slave = pty.openpty()
        proc = subprocess.Popen(self.status_argv("--watch", "--interval", "0.2"), stdin=slave, stdout=slave,
                                stderr=slave, start_new_session=True)
        os.close(slave)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        out = b""
        stopped = False
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                if not stopped and out.count(b"\x1b[H") >= 2:
                    proc.send_signal(signal.SIGINT)
                    stopped = True
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # EIO: the terminal's last writer is gone
                        chunk = b""
                    if not chunk:
                        break
                    out += chunk
                elif proc.poll() is not None:
                    break
        finally:
            os.close(master)
        self.assertTrue(stopped, "no two redraws within 60 s: %r" % out[-2000:])
        self.assertEqual(proc.wait(timeout=30), 0, out[-2000:])
        return out


if __name__ == "__main__":
    harness.main()
