"""A torch.distributed script written for torchrun (env:// init, Gloo,
DistributedDataParallel, DistributedSampler, @record) runs unchanged under
`cpptorchrun --nproc_per_node=2 script.py` with Debian's /usr/bin/python3,
and an exception in it is the root cause, with its message, in cpptorchrun's
failure summary."""
import glob
import json
import os
import re
import subprocess
import unittest

from tests import harness
from tests import jobs
from tests import ops

PY = "/usr/bin/python3"


def has_torch():
    return os.path.exists(PY) and subprocess.run(
        [PY, "-c", "import torch.distributed"], capture_output=True).returncode == 0


@unittest.skipUnless(has_torch(), "needs PyTorch for /usr/bin/python3 (Debian's python3-torch)")
class PythonCompatTest(unittest.TestCase):
    def run_script(self, *script_args):
        out = jobs.work_dir(self, "cpt-compat-")
        script = os.path.abspath("tests/scripts/ddp_compat.py")
        env = dict(os.environ, PYTHON_EXEC=PY)
        r = subprocess.run([harness.binary("launcher/cpptorchrun"), "--nproc_per_node=2", script,
                            "--out", out] + list(script_args),
                           capture_output=True, text=True, env=env, timeout=600)
        return r, out

    def test_trains_with_right_ranks(self):
        r, out = self.run_script("--steps", "60")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        results = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "rank*.json")))]
        self.assertEqual([x["rank"] for x in results], [0, 1])
        for x in results:
            self.assertEqual(x["world_size"], 2)
            self.assertEqual(x["env_world_size"], 2)
            self.assertEqual(x["env_rank"], x["rank"])
            self.assertEqual(x["env_local_rank"], x["rank"])
            self.assertLess(x["last_loss"], x["first_loss"] / 2, "training converges")
        # DDP keeps the replicas equal.
        self.assertAlmostEqual(results[0]["checksum"], results[1]["checksum"], places=4)

    def test_record_exception_is_root_cause(self):
        r, _ = self.run_script("--fail_rank", "1")
        self.assertNotEqual(r.returncode, 0)
        text = r.stdout + r.stderr
        self.assertIn("RuntimeError: rank 1 failed on purpose", text)
        self.assertIn("Root Cause", text)
        root = text[text.index("Root Cause"):]
        root = root[:root.find("=====")]
        self.assertRegex(root, r"rank\s*:\s*1 \(local_rank: 1\)", "rank 1 is the root cause")
        self.assertIn("message   : RuntimeError: rank 1 failed on purpose", root)

    def test_an_expired_file_timer_kills_its_worker(self):
        # torchrun's watchdog protocol: TORCHELASTIC_ENABLE_FILE_TIMER=1 in the
        # launcher's environment, torch's FileTimerClient in the script.
        out = jobs.work_dir(self, "cpt-timer-")
        logs = os.path.join(out, "logs")
        env = dict(os.environ, PYTHON_EXEC=PY, TORCHELASTIC_ENABLE_FILE_TIMER="1")
        env.pop("TORCHELASTIC_TIMER_FILE", None)
        r = subprocess.run([harness.binary("launcher/cpptorchrun"), "--nproc_per_node=2", "--max_restarts=1",
                            "--log_dir", logs, os.path.abspath("tests/scripts/file_timer_steps.py"), out],
                           capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        done = sorted(n for n in os.listdir(out) if n.startswith("done."))
        self.assertEqual(done, ["done.0.0", "done.0.1", "done.1.1"], "rank 1's first attempt never finished")
        expired = jobs.named(jobs.events_in(logs), "file_timer_expired")
        self.assertEqual([(e["local_rank"], e["scope_id"], e["signal"]) for e in expired],
                         [(1, "step", "SIGKILL")], expired)
        self.assertTrue(jobs.named(jobs.events_in(logs), "restart", cause="worker_failed"))
        self.assertIn("file timer 'step' of worker local rank 1", r.stderr)


    def test_a_stopped_worker_without_heartbeats_is_found_by_default(self):
        # No --worker_timeout: the launcher's default rule for a script that
        # sends no heartbeats (stopped at every look, using no CPU time
        # between looks, for 2 s is a hang).
        self.check_stopped_worker([])

    def test_a_stopped_worker_of_a_forkserver_is_found_with_its_stack(self):
        self.check_stopped_worker(["--start_method", "forkserver"])

    def check_stopped_worker(self, flags):
        out = jobs.work_dir(self, "cpt-stopped-")
        logs = os.path.join(out, "logs")
        script = os.path.abspath("tests/scripts/stop_self.py")
        r = subprocess.run([harness.binary("launcher/cpptorchrun"), "--nproc_per_node=2", "--max_restarts=1",
                            "--log_dir", logs] + flags + [script, out],
                           capture_output=True, text=True, env=dict(os.environ, PYTHON_EXEC=PY), timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        done = sorted(n for n in os.listdir(out) if n.startswith("done."))
        self.assertEqual(done, ["done.0.1", "done.1.1"])
        events = jobs.events_in(logs)
        hang = jobs.named(events, "hang_detected")
        self.assertEqual(len(hang), 1, hang)
        self.assertEqual((hang[0]["culprit_ranks"], hang[0]["waiting_ranks"]), ([1], []), hang)
        self.assertGreaterEqual(hang[0]["waited_s"], 2.0, hang)
        self.assertEqual(hang[0]["deadline_s"], 2.0, hang)
        self.assertIn("rank 1: stopped (T)", hang[0]["process_states"])
        self.assertIn("its process has been stopped (T) for", r.stderr)
        # Its stack, taken before it was killed (faulthandler, SIGABRT): where
        # it stopped, in the event and on its console lines.
        stacks = jobs.named(events, "worker_stack")
        self.assertEqual([s["rank"] for s in stacks], [1], stacks)
        self.assertRegex(stacks[0]["stack"], r'File "%s", line \d+ in stop_here' % re.escape(script))
        self.assertTrue(stacks[0]["stack"].startswith("Fatal Python error: Aborted"), stacks[0])
        self.assertIn("[default1]:Fatal Python error: Aborted", r.stderr)


# What PyTorch's own test_launch_elastic (test/distributed/launcher/test_run.py)
# runs: its worker script touches a file named after its global rank.
TOUCH_RANK = "import os, sys; open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').close()"


@unittest.skipUnless(has_torch(), "needs PyTorch for /usr/bin/python3 (Debian's python3-torch)")
class TorchrunOwnTestsTest(unittest.TestCase):
    def test_launch_elastic_with_its_rdzv_conf_quoted_twice(self):
        # PyTorch's test passes the arguments as a Python list, so the
        # quotes of "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'"
        # reach the launcher: torchrun ignores the keys it cannot use and
        # goes on; so must cpptorchrun (a warning naming the quoted key).
        out = jobs.work_dir(self, "cpt-elastic-")
        script = os.path.join(out, "touch_rank.py")
        with open(script, "w") as f:
            f.write(TOUCH_RANK + "\n")
        touched = os.path.join(out, "touched")
        os.mkdir(touched)
        port = ops.free_port()
        argv = [harness.binary("launcher/cpptorchrun"), "--nnodes=1:2", "--nproc-per-node=4",
                "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:%d" % port,
                "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id=elastic",
                "--monitor-interval=1", "--start-method=spawn", script, touched]
        r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PYTHON_EXEC=PY),
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertEqual(sorted(os.listdir(touched)), ["0", "1", "2", "3"])
        self.assertIn("key ''join_timeout' is not used by cpptorchrun", r.stderr)


if __name__ == "__main__":
    harness.main()
