"""TLS to the rendezvous for everything that talks to it (issue 14): the
launchers, their workers' store traffic and `cpptorchrun status`, with
certificates this test makes (a CA of its own, a server certificate for
host 0 by address and by name).

1. A rendezvous_server with --tls_cert/--tls_key and a token; two nodes
   with --rdzv_conf token_file=...,cacert=...: the job trains and exits 0;
   `cpptorchrun status --rdzv_conf cacert=...` reads it while it runs.
2. The torchrun-style line: host 0 serves the endpoint itself with
   --rdzv_conf cert=...,key=...; the same command line on both hosts.
"""
import os
import random
import re
import subprocess
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "4096", "--checkpoint_every", "8", "--heartbeat_interval", "0.2",
         "--progress", "lines"]


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), r.stderr))


class TlsJobTest(unittest.TestCase):
    def setUp(self):
        if subprocess.run(["sh", "-c", "command -v openssl"], capture_output=True).returncode != 0:
            self.skipTest("the openssl command is not installed; cannot make certificates")
        self.cluster = harness.Cluster(3)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-tls-")
        host0 = self.cluster.hosts[0]
        d = self.work
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                "-days", "1", "-subj", "/CN=cpptorchrun test CA", cwd=d)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                "-subj", "/CN=%s" % host0.name, cwd=d)
        with open(os.path.join(d, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:%s,DNS:%s,DNS:localhost,IP:127.0.0.1\n" % (host0.addr, host0.name))
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "1", "-extfile", "san.ext", cwd=d)
        self.ca = os.path.join(d, "ca.pem")
        self.cert = os.path.join(d, "server.pem")
        self.key = os.path.join(d, "server.key")
        self.token = os.path.join(d, "token")
        with open(self.token, "w") as f:
            f.write("tls-token-%x\n" % random.getrandbits(48))
        self.run_id = "tls-%06x" % random.getrandbits(24)

    def status(self, endpoint, conf):
        r = subprocess.run(self.cluster.hosts[1].argv(
            [harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", endpoint, "--rdzv_id", self.run_id,
             "--rdzv_conf", conf]), capture_output=True, text=True, timeout=60)
        return r.stdout if r.returncode == 0 else None

    def finish(self, nodes):
        for n in nodes:
            self.assertEqual(n.wait(600), 0, n.text()[-4000:])
        paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
        self.assertEqual(len(paths), 1)
        m = jobs.read_metrics(paths[0])
        self.assertEqual(m["world_size"], 4)
        self.assertEqual(jobs.job_leftovers(self.run_id), [])

    def test_job_and_status_over_tls_to_a_rendezvous_server(self):
        server = jobs.RdzvServer(self.cluster.hosts[0], self.work,
                                 extra=["--tls_cert", self.cert, "--tls_key", self.key, "--token_file", self.token])
        self.assertIn("(TLS)", harness.wait_for(lambda: "serving on" in server.text() and server.text(), 30,
                                                 "the server's first line"))
        conf = "token_file=%s,cacert=%s" % (self.token, self.ca)
        nodes = [jobs.Node(self.cluster.hosts[i], self.work, "node%d" % i, server.endpoint, "2:2",
                           run_id=self.run_id, launcher_args=["--rdzv_conf", conf], train_args=TRAIN)
                 for i in (1, 2)]
        table = harness.wait_for(lambda: self.status(server.endpoint, conf), 120, "status over TLS")
        self.assertIn("run " + self.run_id, table)
        # Without the CA, status cannot trust the server: it says so and fails.
        r = subprocess.run(self.cluster.hosts[1].argv(
            [harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", server.endpoint, "--rdzv_id",
             self.run_id, "--rdzv_conf", "token_file=%s" % self.token]), capture_output=True, text=True,
            timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.finish(nodes)

    def test_the_serving_node_serves_tls_itself(self):
        if not self.cluster.netns:
            self.skipTest("needs hosts with their own names (network namespaces): " + self.cluster.why_not_netns)
        host0 = self.cluster.hosts[0]
        endpoint = "%s:29400" % host0.name
        conf = "token_file=%s,cacert=%s,cert=%s,key=%s" % (self.token, self.ca, self.cert, self.key)
        nodes = [jobs.Node(self.cluster.hosts[i], self.work, "node%d" % i, endpoint, "2", run_id=self.run_id,
                           launcher_args=["--rdzv_conf", conf], train_args=TRAIN) for i in (0, 1)]
        self.finish(nodes)
        self.assertRegex(nodes[0].text(), r"serving the rendezvous at %s" % re.escape(endpoint))


if __name__ == "__main__":
    harness.main()
