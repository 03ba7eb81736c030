"""cpptorchrun under a real Slurm 22.05 cluster (tests/slurm_cluster.py: a
slurmctld, a slurmd per host, munge; two hosts in network namespaces with
their own hostnames), every job started through srun, salloc or sbatch
exactly as a user types it, with nothing on the command line saying where to
meet: the job step's environment says it (launcher/config/slurm.h).

  * the README's line, a real training on both hosts;
  * two jobs back to back on the same first host;
  * scancel --signal=USR1 mid-training: the job goes on, rank 0 writes a
    checkpoint for it, each worker sees the signal once;
  * a step on part of an allocation; two steps at once in one allocation;
  * a job cancelled while its rendezvous cannot be reached: the launcher
    exits within its shutdown grace, before Slurm's SIGKILL;
  * a job preempted (scontrol requeue) and run again by Slurm: it resumes
    from the checkpoint its SIGTERM wrote.

Skipped, saying why, where Slurm or network namespaces cannot be had.
"""
import os
import re
import shlex
import unittest

from tests import harness
from tests import jobs
from tests import slurm_cluster

# Small and quick: 2 cores run both hosts' workers.
TRAIN_ARGS = ["--epochs", "1", "--limit", "2048", "--progress", "none"]


class SlurmTest(unittest.TestCase):
    def setUp(self):
        ok, why = slurm_cluster.available()
        if not ok:
            self.skipTest(why)
        self.cluster = harness.Cluster(2, use_netns=True)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-slurm-")
        self.slurm = slurm_cluster.SlurmCluster(self.cluster, self.work, cpus=2, kill_wait=5, cred_expire=10)
        self.addCleanup(self.nothing_left)  # runs after the cluster's close
        self.addCleanup(self.slurm.close)
        self.slurm.start()
        self.logs = os.path.join(self.work, "logs")
        self.launcher = harness.binary(jobs.LAUNCHER)
        self.train = harness.binary(jobs.TRAIN)

    def nothing_left(self):
        """No daemon, slurmstepd, task or worker of the cluster outlives it."""
        self.assertEqual(self.slurm.leftovers(), [])

    def launch(self, nproc=1, extra=(), train_args=TRAIN_ARGS, tag="job"):
        """The launcher's command line as a user types it after srun."""
        return ([self.launcher, "--nproc_per_node=%d" % nproc, "--log_dir", self.logs] + list(extra)
                + [self.train, "--metrics_json", os.path.join(self.work, tag + "-metrics.json")]
                + list(train_args))

    def srun(self, srun_args, launch, tag="job", timeout=300):
        """Runs `srun SRUN_ARGS LAUNCH` on h0 to its end; (exit code, output)."""
        log = os.path.join(self.work, tag + ".log")
        p = self.slurm.spawn(["srun"] + list(srun_args) + list(launch), log=log)
        try:
            rc = p.wait(timeout=timeout)
        except Exception:
            rc = None
        return rc, self.read(log)

    @staticmethod
    def read(path):
        with open(path, errors="replace") as f:
            return f.read()

    def events(self, run_id):
        """Every launcher's events of run `run_id` in the shared --log_dir."""
        return jobs.events_in(self.logs, run_id)

    def metrics(self, tag="job"):
        return jobs.read_metrics(os.path.join(self.work, tag + "-metrics.json"))

    def job_ids(self):
        return [int(j) for j in self.slurm.jobs() if j.isdigit()]

    def check_trained(self, rc, text, world, tag="job"):
        self.assertEqual(rc, 0, text[-4000:] + self.slurm.log_tails())
        self.assertEqual(self.metrics(tag)["world_size"], world)

    # -- the scenarios ------------------------------------------------------

    def test_the_readmes_line_trains_on_both_hosts(self):
        rc, text = self.srun(["-N2", "--ntasks-per-node=1"], self.launch(nproc=1))
        self.check_trained(rc, text, world=2)
        # Both launchers took the job from Slurm: the step's run id, the
        # first host of the step's nodes, its own port.
        runs = re.findall(r"Slurm job (\d+) step (\d+) \(node (\d)\): took (.*)", text)
        self.assertEqual(sorted(r[2] for r in runs), ["0", "1"], text[-3000:])
        job, step = runs[0][0], runs[0][1]
        self.assertIn("--rdzv_id %s.%s (SLURM_JOB_ID.SLURM_STEP_ID)" % (job, step), runs[0][3])
        self.assertIn("--rdzv_endpoint h0:", runs[0][3])
        joined = jobs.named(self.events("%s.%s" % (job, step)), "round_joined")
        self.assertEqual(sorted(e["group_rank"] for e in joined), [0, 1])
        self.assertEqual({e["world_size"] for e in joined}, {2})

    def test_two_jobs_back_to_back_on_the_same_first_host(self):
        for tag in ("first", "second"):
            rc, text = self.srun(["-N2", "--ntasks-per-node=1"], self.launch(tag=tag), tag=tag)
            self.check_trained(rc, text, world=2, tag=tag)

    def test_usr1_mid_training_checkpoints_and_goes_on_each_worker_seeing_it_once(self):
        ckpt = os.path.join(self.work, "ckpt")
        args = ["--epochs", "3", "--limit", "4096", "--progress", "none", "--checkpoint_dir", ckpt,
                "--checkpoint_every", "20", "--keep_checkpoints", "1000"]
        log = os.path.join(self.work, "job.log")
        p = self.slurm.spawn(["srun", "-N2", "--ntasks-per-node=1"] + self.launch(nproc=1, train_args=args),
                             log=log)
        job = harness.wait_for(lambda: self.job_ids() and self.job_ids()[0], 60, "the job to be queued")
        jobs.wait_checkpoint(ckpt, timeout=120)  # training is under way
        before = set(jobs.checkpoints(ckpt))
        self.slurm.signal(job, "USR1")
        rc = p.wait(timeout=300)
        text = self.read(log)
        self.check_trained(rc, text, world=2)
        events = self.events("%d.0" % job)
        # Each worker saw SIGUSR1 once: from Slurm, not again from its launcher.
        workers = [pid for e in jobs.named(events, "workers_started") for pid in e["pids"]]
        self.assertEqual(len(workers), 2, events)
        seen = [e["pid"] for e in jobs.named(events, "worker_signal", signal="SIGUSR1")]
        self.assertEqual(sorted(seen), sorted(workers), events)
        for e in jobs.named(events, "signal_received", signal="SIGUSR1"):
            self.assertEqual((e["sender"], e["forwarded"]), ("slurmstepd", 0), e)
        self.assertEqual(len(jobs.named(events, "signal_received", signal="SIGUSR1")), 2, "both launchers got it")
        # Rank 0 wrote a checkpoint for it and went on to the end.
        written = jobs.named(events, "worker_signal_checkpoint", rank=0)
        self.assertEqual(len(written), 1, events)
        self.assertEqual(written[0]["then"], "going on")
        name = "ckpt-%012d.bin" % written[0]["step"]
        self.assertIn(name, jobs.checkpoints(ckpt))
        self.assertNotIn(name, before, "written for the signal, not one of the periodic ones before it")
        self.assertEqual(len(jobs.named(events, "round_joined")), 2, "no restart: one round, both nodes")

    def test_a_step_on_part_of_an_allocation(self):
        # salloc -N2, then a step on h1 alone: it meets on h1, not on the
        # allocation's first host (where nobody would serve it).
        launch = self.launch(nproc=2)
        r = self.slurm.run(["salloc", "-N2", "srun", "-N1", "-w", "h1"] + launch, timeout=300, check=False)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:] + self.slurm.log_tails())
        self.assertEqual(self.metrics()["world_size"], 2)
        self.assertRegex(r.stdout + r.stderr, r"--rdzv_endpoint h1:\d+ \(the first host of SLURM_STEP_NODELIST")

    def test_two_steps_at_once_in_one_allocation(self):
        a = " ".join(shlex.quote(x) for x in self.launch(tag="a"))
        b = " ".join(shlex.quote(x) for x in self.launch(tag="b"))
        script = ("srun -N2 --ntasks-per-node=1 --overlap %s > %s 2>&1 & A=$!\n"
                  "srun -N2 --ntasks-per-node=1 --overlap %s > %s 2>&1 & B=$!\n"
                  "wait $A; echo a=$?; wait $B; echo b=$?\n"
                  % (a, os.path.join(self.work, "a.log"), b, os.path.join(self.work, "b.log")))
        r = self.slurm.run(["salloc", "-N2", "sh", "-c", script], timeout=300, check=False)
        text = r.stdout + r.stderr
        self.assertIn("a=0", text, text + self.read(os.path.join(self.work, "a.log"))[-3000:])
        self.assertIn("b=0", text, text + self.read(os.path.join(self.work, "b.log"))[-3000:])
        self.assertEqual(self.metrics("a")["world_size"], 2)
        self.assertEqual(self.metrics("b")["world_size"], 2)
        # Two runs (one per step), each with both nodes, at two ports.
        ids = set(re.findall(r"--rdzv_id (\d+\.\d+) ", self.read(os.path.join(self.work, "a.log")) +
                             self.read(os.path.join(self.work, "b.log"))))
        self.assertEqual(len(ids), 2, ids)
        for run_id in ids:
            self.assertEqual(len(jobs.named(self.events(run_id), "round_joined")), 2, run_id)

    def test_cancelled_while_the_rendezvous_is_unreachable_exits_within_the_grace(self):
        # h1 alone, told to meet at h0, where nobody serves: its join retries.
        # scancel: the launcher's leave cannot reach the rendezvous either;
        # it exits within --shutdown_timeout (2 s), before Slurm's SIGKILL
        # (KillWait 5 s), with 128 + SIGTERM.
        launch = self.launch(extra=["--nnodes", "2", "--rdzv_endpoint", "h0:29399", "--rdzv_id", "unreachable",
                                    "--shutdown_timeout", "2"])
        log = os.path.join(self.work, "job.log")
        p = self.slurm.spawn(["srun", "-N1", "-w", "h1"] + launch, log=log)
        job = harness.wait_for(lambda: self.job_ids() and self.job_ids()[0], 60, "the job to be queued")
        harness.wait_for(lambda: "this node's address" in self.read(log), 60, "the launcher to start")
        self.slurm.cancel(job)
        p.wait(timeout=60)
        text = self.read(log)
        events = self.events("unreachable")
        # The leave was tried, and given up at the end of the grace.
        self.assertEqual(len(jobs.named(events, "exit_call_abandoned", call="leave")), 1, events)
        self.assertEqual([e["exit_code"] for e in jobs.named(events, "finished")], [143], events)
        # srun saw the launcher exit by itself, not Slurm's SIGKILL.
        self.assertRegex(text, r"task 0: Exited with exit code 143", text[-3000:] + self.slurm.log_tails())
        self.assertNotIn("Killed", text)
        harness.wait_for(lambda: not self.job_ids(), 60, "the job to leave the queue")
        self.assertEqual(harness.processes_with_env("SLURM_JOB_ID", str(job)), [], "nothing of the job is left")

    def test_a_preempted_and_requeued_job_resumes_from_its_checkpoint(self):
        ckpt = os.path.join(self.work, "ckpt")
        args = ["--epochs", "3", "--limit", "4096", "--progress", "none", "--checkpoint_dir", ckpt,
                "--checkpoint_every", "20", "--keep_checkpoints", "1000"]
        launch = " ".join(shlex.quote(x) for x in self.launch(nproc=1, train_args=args))
        script = os.path.join(self.work, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexec srun --ntasks-per-node=1 %s\n" % launch)
        os.chmod(script, 0o755)
        out = os.path.join(self.work, "slurm-%j.out")
        job = self.slurm.submit(["--requeue", "-N2", "-o", out, script])
        self.slurm.wait_job_state(job, "RUNNING", 60)
        jobs.wait_checkpoint(ckpt, timeout=120)  # training is under way
        self.slurm.requeue(job)
        self.slurm.wait_job_state(job, "COMPLETED", 240)
        self.assertEqual(self.slurm.job_field(job, "Restarts"), "1")
        events = self.events("%d.0" % job)
        stopped = jobs.named(events, "worker_signal_checkpoint", rank=0, then="stopping")
        self.assertEqual(len(stopped), 1, events)
        # The preemption's SIGTERM reached each worker of the first run once
        # (from Slurm; the launchers, which got it too, sent none again).
        first_run = sorted(jobs.named(events, "workers_started"), key=lambda e: e["time"])[:2]
        workers = sorted(pid for e in first_run for pid in e["pids"])
        self.assertEqual(sorted(e["pid"] for e in jobs.named(events, "worker_signal", signal="SIGTERM")),
                         workers, events)
        for e in jobs.named(events, "signal_received", signal="SIGTERM"):
            self.assertEqual((e["sender"], e["forwarded"]), ("slurmstepd", 0), e)
        resumed = jobs.named(events, "worker_resumed", rank=0)
        self.assertEqual([e["step"] for e in resumed], [stopped[0]["step"]], events)
        m = self.metrics()
        self.assertEqual(m["world_size"], 2)
        self.assertEqual(m["resumed_from_step"], stopped[0]["step"])


if __name__ == "__main__":
    harness.main()
