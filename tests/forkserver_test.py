"""--start_method forkserver: Python workers forked from the per-node
forkserver (launcher/agent/forkserver.py) are what `python -u script.py`
would have made, compared field by field with exec'd ones (spawn); an
exception under @record is the root cause in the summary; torch DDP trains;
forked workers die with a SIGKILLed launcher; a forkserver that cannot
preload leaves the job spawned, not failed."""
import glob
import json
import os
import subprocess
import unittest

from tests import harness
from tests import jobs

PY = "/usr/bin/python3"
SCRIPTS = os.path.abspath("tests/scripts")
# Environment values that differ from one run to the next by design (a
# fresh port, the launcher's private folder), checked by their form.
PER_RUN = {
    "MASTER_PORT": r"\d+",
    "CPPTORCHRUN_RDZV_ENDPOINT": r"127\.0\.0\.1:\d+",
    "CPPTORCHRUN_AGENT_SOCKET": r"/.*/agent\.sock",
    "TORCHELASTIC_ERROR_FILE": r"/.*/attempt_0/[01]/error\.json",
}


def has_torch():
    return os.path.exists(PY) and subprocess.run(
        [PY, "-c", "import torch.distributed"], capture_output=True).returncode == 0


@unittest.skipUnless(has_torch(), "needs PyTorch for /usr/bin/python3 (Debian's python3-torch)")
class ForkserverTest(unittest.TestCase):
    def launch(self, start_method, program, extra=(), cwd=None, timeout=600, preload=None, out=None):
        out = out or jobs.work_dir(self, "cpt-fs-")
        logs = os.path.join(out, "logs-" + start_method)
        argv = [harness.binary(jobs.LAUNCHER), "--nproc_per_node=2", "--rdzv_id", "fs-test",
                "--start_method", start_method, "--log_dir", logs] + (
                ["--forkserver_preload", preload] if preload is not None else []) + list(program) + [
                "--out", out] + list(extra)
        env = dict(os.environ, PYTHON_EXEC=PY)
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
        return r, out, jobs.events_in(logs)

    def probes(self, out):
        return {os.path.basename(p): harness.read_json(p) for p in sorted(glob.glob(os.path.join(out, "rank*.json")))}

    def assert_same_worker(self, program, cwd=None):
        # The same command line both times: one --out folder, read between.
        out = jobs.work_dir(self, "cpt-fs-")
        spawned, _, _ = self.launch("spawn", program, cwd=cwd, out=out)
        self.assertEqual(spawned.returncode, 0, spawned.stderr[-3000:])
        a = self.probes(out)
        for p in glob.glob(os.path.join(out, "rank*.json")):
            os.unlink(p)
        forked, _, events = self.launch("forkserver", program, cwd=cwd, out=out)
        self.assertEqual(forked.returncode, 0, forked.stderr[-3000:])
        b = self.probes(out)
        # Both workers came from the forkserver, not from a fallback.
        self.assertEqual([e["from"] for e in jobs.named(events, "warm_started")], ["forkserver"] * 2, events)
        self.assertEqual(jobs.named(events, "warm_fallback"), [])
        self.assertEqual(sorted(a), ["rank0.json", "rank1.json"])
        self.assertEqual(sorted(b), sorted(a))
        for name in a:
            exec_view, fork_view = a[name], b[name]
            for key in sorted(exec_view):
                if key in ("pid", "ppid", "env"):
                    continue
                self.assertEqual(fork_view[key], exec_view[key], "%s: %s differs" % (name, key))
            self.assertEqual(sorted(fork_view["env"]), sorted(exec_view["env"]), name + ": the variables")
            for var, value in exec_view["env"].items():
                if var in PER_RUN:
                    self.assertRegex(value, "^%s$" % PER_RUN[var])
                    self.assertRegex(fork_view["env"][var], "^%s$" % PER_RUN[var])
                else:
                    self.assertEqual(fork_view["env"][var], value, "%s: $%s differs" % (name, var))
            self.assertTrue(fork_view["leads_its_group"])
            self.assertNotEqual(fork_view["pid"], exec_view["pid"])
        return a, b

    def test_a_forked_script_worker_is_what_exec_makes(self):
        a, _ = self.assert_same_worker([os.path.join(SCRIPTS, "probe_worker.py")])
        # Python's rule, which the fork follows: the script's real folder
        # (the runfiles' symlink resolved).
        self.assertEqual(a["rank0.json"]["sys_path0"],
                         os.path.dirname(os.path.realpath(os.path.join(SCRIPTS, "probe_worker.py"))))

    def test_a_forked_module_worker_is_what_exec_makes(self):
        a, _ = self.assert_same_worker(["-m", "probe_worker"], cwd=SCRIPTS)
        self.assertEqual(a["rank1.json"]["main_spec_name"], "probe_worker")

    def test_ddp_trains_and_record_exception_is_the_root_cause(self):
        ok, out, events = self.launch("forkserver", [os.path.join(SCRIPTS, "ddp_compat.py")], ["--steps", "60"])
        self.assertEqual(ok.returncode, 0, ok.stdout[-3000:] + ok.stderr[-3000:])
        self.assertEqual(len(jobs.named(events, "warm_started", **{"from": "forkserver"})), 2, events)
        results = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "rank*.json")))]
        self.assertEqual([x["rank"] for x in results], [0, 1])
        for x in results:
            self.assertLess(x["last_loss"], x["first_loss"] / 2, "training converges")
        self.assertAlmostEqual(results[0]["checksum"], results[1]["checksum"], places=4)

        bad, _, events = self.launch("forkserver", [os.path.join(SCRIPTS, "ddp_compat.py")], ["--fail_rank", "1"])
        self.assertNotEqual(bad.returncode, 0)
        self.assertEqual(len(jobs.named(events, "warm_started", **{"from": "forkserver"})), 2, events)
        text = bad.stdout + bad.stderr
        root = text[text.index("Root Cause"):]
        root = root[:root.find("=====")]
        self.assertRegex(root, r"rank\s*:\s*1 \(local_rank: 1\)", "rank 1 is the root cause")
        self.assertIn("message   : RuntimeError: rank 1 failed on purpose", root)
        self.assertRegex(root, r"error_file: /\S+/attempt_0/1/error\.json")

    def test_forked_workers_die_with_a_sigkilled_launcher(self):
        out = jobs.work_dir(self, "cpt-fs-kill-")
        logs = os.path.join(out, "logs")
        log = open(os.path.join(out, "launcher.log"), "wb")
        p = subprocess.Popen([harness.binary(jobs.LAUNCHER), "--nproc_per_node=2", "--start_method", "forkserver",
                              "--log_dir", logs, os.path.join(SCRIPTS, "probe_worker.py"), "--out", out,
                              "--sleep", "600"], stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, PYTHON_EXEC=PY))
        log.close()
        self.addCleanup(lambda: p.poll() is None and p.kill())
        probes = harness.wait_for(lambda: len(self.probes(out)) == 2 and self.probes(out), 120, "both workers")
        workers = [x["pid"] for x in probes.values()]
        for x in probes.values():
            self.assertEqual(x["ppid"], p.pid, "a forked worker is the launcher's child")
        server = [e["pid"] for e in jobs.events_in(logs) if e["event"] == "forkserver_started"]
        self.assertEqual(len(server), 1)
        p.kill()
        p.wait()

        def alive(pid):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False
        harness.wait_for(lambda: not any(alive(pid) for pid in workers + server), 30,
                         "the forked workers and the forkserver to die with the launcher")

    def test_a_forkserver_that_cannot_preload_leaves_the_job_spawned(self):
        r, out, events = self.launch("forkserver", [os.path.join(SCRIPTS, "probe_worker.py")],
                                     preload="torch,no_such_module_here")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("no_such_module_here", r.stderr)
        self.assertEqual(jobs.named(events, "warm_started"), [])
        self.assertEqual(len(jobs.named(events, "warm_fallback")), 1, events)
        self.assertEqual(len(self.probes(out)), 2)

    def test_a_preload_that_initialised_cuda_is_refused(self):
        out = jobs.work_dir(self, "cpt-fs-cuda-")
        env_backup = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = SCRIPTS
        try:
            r, _, events = self.launch("forkserver", [os.path.join(SCRIPTS, "probe_worker.py")],
                                       preload="torch,pretend_cuda", out=out)
        finally:
            if env_backup is None:
                os.environ.pop("PYTHONPATH")
            else:
                os.environ["PYTHONPATH"] = env_backup
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertRegex(r.stderr, r"\[error\].*forkserver refused: preloading torch,pretend_cuda initialised CUDA")
        self.assertEqual(jobs.named(events, "warm_started"), [])
        self.assertEqual(len(self.probes(out)), 2, "the workers were spawned")

    def test_a_killed_forkserver_is_restarted_and_forks_the_restarted_workers(self):
        out = jobs.work_dir(self, "cpt-fs-restart-")
        logs = os.path.join(out, "logs")
        log = open(os.path.join(out, "launcher.log"), "wb")
        p = subprocess.Popen([harness.binary(jobs.LAUNCHER), "--nproc_per_node=2", "--start_method", "forkserver",
                              "--max_restarts=1", "--monitor_interval=0.1", "--log_dir", logs,
                              os.path.join(SCRIPTS, "probe_worker.py"), "--out", out, "--sleep", "600"],
                             stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHON_EXEC=PY))
        log.close()
        self.addCleanup(lambda: p.poll() is None and p.kill())
        first = harness.wait_for(lambda: len(self.probes(out)) == 2 and self.probes(out), 120, "both workers")
        server = jobs.named(jobs.events_in(logs), "forkserver_started")[0]["pid"]
        os.kill(server, 9)
        harness.wait_for(lambda: len(jobs.named(jobs.events_in(logs), "forkserver_started")) == 2, 60,
                         "a new forkserver")
        for name in list(first):
            os.unlink(os.path.join(out, name))
        os.kill(first["rank1.json"]["pid"], 9)
        second = harness.wait_for(lambda: len(self.probes(out)) == 2 and self.probes(out), 120,
                                  "the restarted workers")
        events = jobs.events_in(logs)
        self.assertEqual(len(jobs.named(events, "forkserver_lost", pid=server)), 1, events)
        forked = [e["pid"] for e in jobs.named(events, "warm_started", **{"from": "forkserver"})]
        self.assertEqual(len(forked), 4, events)
        self.assertEqual(sorted(x["pid"] for x in second.values()), sorted(forked[2:]))
        for x in second.values():
            self.assertEqual(x["env"]["TORCHELASTIC_RESTART_COUNT"], "1")
            self.assertEqual(x["ppid"], p.pid)
        p.kill()
        p.wait()

    def test_bad_preload_names_the_flag(self):
        r = subprocess.run([harness.binary(jobs.LAUNCHER), "--start_method", "forkserver",
                            "--forkserver_preload", "torch;rm -rf", "x.py"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--forkserver_preload", r.stderr)


if __name__ == "__main__":
    harness.main()
