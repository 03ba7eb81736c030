"""The short form of tools/chaos: a 2-node fake-GPU job under random kills
of workers and launchers for a few seconds finishes, reaches the accuracy
of its undisturbed twin, and leaves no process behind."""
import os
import subprocess
import sys
import unittest

from tests import harness
from tests import jobs


class ChaosTest(unittest.TestCase):
    def test_short_chaos(self):
        env = dict(os.environ, CPPTORCHRUN_BIN_DIR=os.path.join(harness.RUNFILES, harness.WORKSPACE))
        r = subprocess.run([sys.executable, "-m", "tools.chaos", "--duration", "16", "--interval", "4",
                            "--limit", "16384", "--seed", "7",
                            "--work", jobs.work_dir(self, "cpt-chaos-")],
                           capture_output=True, text=True, env=env, timeout=1200)
        print(r.stdout[-4000:], r.stderr[-4000:])
        self.assertEqual(r.returncode, 0, "chaos reported a failure")
        self.assertIn("processes left      : 0", r.stdout)
        self.assertRegex(r.stdout, r"kills\s+: [1-9]\d* workers|, [1-9]\d* launchers")


if __name__ == "__main__":
    harness.main()
