"""Operations, Prometheus: Debian's real prometheus scrapes a live 2-node
fake-GPU job (the rendezvous_server's --metrics_port and both launchers'
--metrics_port, all behind the job's token), and its HTTP API shows the
steps rising, a worker's kill -9 counted (by signal), the restart it caused
on both nodes and at the server, and the new round.
"""
import os
import random
import signal
import subprocess
import time
import unittest

from tests import harness
from tests import jobs
from tests import ops

TRAIN = ["--epochs", "3", "--limit", "16384", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


class PrometheusScrapeTest(unittest.TestCase):
    def setUp(self):
        ops.need("prometheus")
        self.cluster = harness.Cluster(2, use_netns=False)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-prom-")
        self.token = "prom-%016x" % random.getrandbits(64)
        self.token_file = os.path.join(self.work, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        self.run_id = "prom-%06x" % random.getrandbits(24)

    def test_prometheus_sees_steps_restarts_and_a_kill(self):
        started = time.monotonic()
        h0, h1 = self.cluster.hosts
        server = jobs.RdzvServer(h0, self.work, extra=["--metrics_port", "0", "--token_file", self.token_file])
        server_url = harness.wait_for(lambda: ops.metrics_url(server.text()), 30, "the server's metrics port")
        conf = ["--rdzv_conf", "token_file=%s,keep_alive_interval=0.5,keep_alive_max_attempt=2,"
                "last_call_timeout=1,join_timeout=60" % self.token_file, "--metrics_port", "0"]
        a = jobs.Node(h0, self.work, "nodeA", server.endpoint, "2:2", nproc=1, run_id=self.run_id,
                      launcher_args=conf, train_args=TRAIN)
        b = jobs.Node(h1, self.work, "nodeB", server.endpoint, "2:2", nproc=1, run_id=self.run_id,
                      launcher_args=conf, train_args=TRAIN)
        urls = [server_url] + [harness.wait_for(lambda n=n: ops.metrics_url(n.text()), 30,
                                                n.name + "'s metrics port") for n in (a, b)]

        # The token guards every target: none, or a wrong one, is refused.
        for url in urls:
            self.assertEqual(ops.http_get(url + "/metrics")[0], 401, url)
            self.assertEqual(ops.http_get(url + "/metrics", token="wrong")[0], 401, url)
            status, body = ops.http_get(url + "/metrics", token=self.token)
            self.assertEqual(status, 200, url)
            self.assertIn("# TYPE ", body)

        prom = ops.Prometheus(h0, self.work, [u.split("://", 1)[1] for u in urls], self.token_file)
        self.addCleanup(prom.stop)
        harness.wait_for(lambda: prom.scalar("count(up == 1)") == 3, 60, "prometheus to scrape all three targets",
                         interval=0.5)

        # Steps rise, seen by the launchers and (through keep-alives) by the server.
        first = harness.wait_for(lambda: prom.scalar("min(cpptorchrun_launcher_rank_step)"), 120,
                                 "a step in prometheus", interval=0.5)
        harness.wait_for(lambda: (prom.scalar("min(cpptorchrun_launcher_rank_step)") or 0) > first, 60,
                         "the step to rise", interval=0.5)
        harness.wait_for(lambda: (prom.scalar('max(cpptorchrun_rdzv_rank_step{run="%s"})' % self.run_id) or 0) > 0,
                         60, "the server's view of the steps", interval=0.5)
        self.assertEqual(prom.scalar('cpptorchrun_rdzv_world_size{run="%s"}' % self.run_id), 2)
        rounds_before = prom.scalar('cpptorchrun_rdzv_rounds_completed_total{run="%s"}' % self.run_id)

        # kill -9 one of node B's workers once a checkpoint exists.
        jobs.wait_checkpoint(os.path.join(self.work, "ckpt"), timeout=120)
        victim = harness.wait_for(b.worker_pids, 30, "node B's worker")[0]
        os.kill(victim, signal.SIGKILL)

        harness.wait_for(lambda: prom.scalar(
            'sum(cpptorchrun_launcher_worker_failures_total{kind="signal",value="SIGKILL"})') == 1, 60,
            "prometheus to count the kill -9", interval=0.5)
        harness.wait_for(lambda: prom.scalar(
            'sum(cpptorchrun_launcher_restarts_total{cause="worker_failed"})') == 1, 60,
            "node B's restart (worker_failed)", interval=0.5)
        harness.wait_for(lambda: prom.scalar(
            'sum(cpptorchrun_launcher_restarts_total{cause="membership"})') == 1, 60,
            "node A's restart (membership)", interval=0.5)
        harness.wait_for(lambda: (prom.scalar(
            'sum(cpptorchrun_rdzv_restarts_total{run="%s"})' % self.run_id) or 0) >= 1, 60,
            "the server to count the restart its keep-alives report", interval=0.5)
        harness.wait_for(lambda: (prom.scalar(
            'cpptorchrun_rdzv_rounds_completed_total{run="%s"}' % self.run_id) or 0) > rounds_before, 60,
            "a new round at the server", interval=0.5)
        # increase() over the job's life: Prometheus sees the counters as counters.
        self.assertGreaterEqual(prom.scalar('sum(increase(cpptorchrun_launcher_restarts_total[5m]))') or 0, 1)
        self.assertTrue(prom.query('cpptorchrun_rdzv_rpcs_total{method="KeepAlive",code="OK"}'))
        self.assertTrue(prom.query('cpptorchrun_rdzv_rpc_duration_seconds_bucket{method="Join"}'))
        # Training goes on after the restart: the steps rise again.
        after = harness.wait_for(lambda: prom.scalar("min(cpptorchrun_launcher_rank_step)"), 60,
                                 "steps after the restart", interval=0.5)
        harness.wait_for(lambda: (prom.scalar("min(cpptorchrun_launcher_rank_step)") or 0) > after, 60,
                         "the step to rise after the restart", interval=0.5)
        # Prometheus's own linter accepts every target's text as the job
        # runs (names, suffixes, HELP and TYPE of every family that has samples now).
        for url in urls:
            body = ops.http_get(url + "/metrics", token=self.token)[1]
            self.assertIn("_rank_step{", body)
            lint = subprocess.run([ops.need("promtool"), "check", "metrics"], input=body,
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(lint.returncode, 0, "%s: %s%s" % (url, lint.stdout, lint.stderr))
        print("prometheus scenario: %.1f s" % (time.monotonic() - started))

    def test_standalone_launcher_serves_the_embedded_servers_metrics_and_page(self):
        """--standalone --metrics_port: one port with the launcher's and the
        embedded rendezvous's metrics, and the job page, behind the token."""
        started = time.monotonic()
        h0 = self.cluster.hosts[0]
        work = self.work
        log = os.path.join(work, "standalone.log")
        proc = h0.spawn([harness.binary(jobs.LAUNCHER), "--standalone", "--nproc_per_node", "2", "--fake_gpus", "2",
                         "--rdzv_id", self.run_id, "--rdzv_conf", "token_file=%s" % self.token_file,
                         "--metrics_port", "0", "--monitor_interval", "0.1", "--log_dir", os.path.join(work, "logs"),
                         harness.binary(jobs.TRAIN), "--epochs", "3", "--limit", "16384", "--heartbeat_interval", "0.2",
                         "--checkpoint_dir", os.path.join(work, "ckpt")], log=log)

        def text():
            with open(log, errors="replace") as f:
                return f.read()

        def url():
            if proc.poll() is not None:
                raise AssertionError("cpptorchrun exited %s:\n%s" % (proc.returncode, text()[-3000:]))
            return ops.metrics_url(text())

        base = harness.wait_for(url, 30, "the launcher's metrics port")
        self.assertEqual(ops.http_get(base + "/metrics")[0], 401)
        self.assertEqual(ops.http_get(base + "/", token="wrong")[0], 401)

        def both():
            code, body = ops.http_get(base + "/metrics", token=self.token)
            return code == 200 and "cpptorchrun_launcher_rank_step{" in body and \
                'cpptorchrun_rdzv_round{run="%s"} 1' % self.run_id in body and body
        body = harness.wait_for(both, 60, "the launcher's and the embedded server's metrics", interval=0.2)
        lint = subprocess.run([ops.need("promtool"), "check", "metrics"], input=body,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        code, page = ops.http_get(base + "/run/" + self.run_id, token=self.token)
        self.assertEqual(code, 200)
        self.assertIn("/static/page.js", page)
        code, runs = ops.http_get(base + "/api/runs", token=self.token)
        self.assertEqual(code, 200)
        self.assertIn('"run_id":"%s"' % self.run_id, runs)
        print("standalone scenario: %.1f s" % (time.monotonic() - started))


if __name__ == "__main__":
    harness.main()
