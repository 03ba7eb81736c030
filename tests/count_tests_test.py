"""tools/ci/count_tests.py, which prints CI's last line: it counts test cases
from Bazel's test.xml files and fails a run in which something failed or
nothing was tested (no case passed, every one skipped included)."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "ci", "count_tests.py")

PASSED = '<testsuite tests="1" failures="0" errors="0"><testcase name="a"/></testsuite>'
SKIPPED = ('<testsuite tests="1" failures="0" errors="0"><testcase name="b"><skipped message="needs root"/>'
           '</testcase></testsuite>')
FAILED = ('<testsuite tests="1" failures="1" errors="0"><testcase name="c"><failure message="x"/></testcase>'
          '</testsuite>')


class CountTestsTest(unittest.TestCase):
    def run_on(self, targets, bazel_rc=0):
        logs = tempfile.mkdtemp(prefix="cpt-count-")
        self.addCleanup(subprocess.run, ["rm", "-rf", logs])
        for name, xml in targets.items():
            os.makedirs(os.path.join(logs, name))
            with open(os.path.join(logs, name, "test.xml"), "w") as f:
                f.write(xml)
        r = subprocess.run([sys.executable, SCRIPT, logs, str(bazel_rc)], capture_output=True, text=True,
                           timeout=60)
        return r.returncode, r.stdout.strip().splitlines()[-1], r.stdout

    def test_passed_and_skipped_cases_are_counted(self):
        rc, last, _ = self.run_on({"t/a": PASSED, "t/b": SKIPPED})
        self.assertEqual((rc, last), (0, "1 passed, 0 failed, 1 skipped"))

    def test_a_failed_case_fails_the_run(self):
        rc, last, out = self.run_on({"t/a": PASSED, "t/c": FAILED})
        self.assertEqual((rc, last), (1, "1 passed, 1 failed, 0 skipped"))
        self.assertIn("FAILED: t/c: c", out)

    def test_a_run_whose_every_case_skipped_tested_nothing(self):
        rc, last, out = self.run_on({"t/b": SKIPPED, "t/b2": SKIPPED})
        self.assertEqual((rc, last), (1, "0 passed, 0 failed, 2 skipped"))
        self.assertIn("nothing was tested", out)

    def test_no_test_logs_at_all_fail(self):
        rc, last, _ = self.run_on({})
        self.assertEqual((rc, last), (1, "0 passed, 0 failed, 0 skipped"))

    def test_bazel_failing_without_a_failed_case_is_a_failure(self):
        rc, last, out = self.run_on({"t/a": PASSED}, bazel_rc=1)
        self.assertEqual((rc, last), (1, "1 passed, 1 failed, 0 skipped"))
        self.assertIn("bazel test exited with 1", out)


if __name__ == "__main__":
    unittest.main()
