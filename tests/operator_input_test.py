"""Scenario 8: bad operator input next to a running job. Each mistake ends
in a clear error within the join timeout, and the running job is unharmed
(it finishes without a restart).

- a second job with the same --rdzv_id but other --nnodes;
- a node with the wrong rendezvous token;
- an unreachable rendezvous endpoint.
"""
import os
import random
import subprocess
import time
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "12288", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]
JOIN_TIMEOUT = 5


class OperatorInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = harness.Cluster(3)
        cls.work = jobs.work_dir(cls, "cpt-operator-")
        cls.token = os.path.join(cls.work, "token")
        with open(cls.token, "w") as f:
            f.write("s3cret-%x\n" % random.getrandbits(64))
        os.chmod(cls.token, 0o600)
        cls.server = jobs.RdzvServer(cls.cluster.hosts[0], cls.work, extra=["--token_file", cls.token])
        cls.run_id = "operator-%06x" % random.getrandbits(24)
        conf = ["--rdzv_conf", "token_file=%s,join_timeout=60,last_call_timeout=1" % cls.token]
        cls.nodes = [jobs.Node(cls.cluster.hosts[i], cls.work, "node%d" % i, cls.server.endpoint, "2:2",
                               run_id=cls.run_id, launcher_args=conf, train_args=TRAIN)
                     for i in (1, 2)]
        harness.wait_for(lambda: all(n.joined(world_size=4) for n in cls.nodes), 120,
                         "the running job's first round")

    @classmethod
    def tearDownClass(cls):
        try:
            for n in cls.nodes:
                rc = n.wait(600)
                assert rc == 0, n.text()[-3000:]
                events = n.events()
                # No restart, counted or not, and no round but the first.
                assert not jobs.named(events, "restart"), "the running job was disturbed: %s" % events
                assert not jobs.named(events, "round_ended"), "the running job was disturbed: %s" % events
                assert [e["round"] for e in jobs.named(events, "round_joined")] == [1], \
                    "the running job was disturbed: %s" % events
        finally:
            cls.cluster.close()

    def intruder(self, endpoint, nnodes, conf):
        """Runs one more launcher; returns (exit code, output, seconds)."""
        argv = [harness.binary(jobs.LAUNCHER), "--nnodes", nnodes, "--nproc_per_node", "1",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", self.run_id,
                "--rdzv_conf", conf,
                "--no_python", "/bin/true"]
        t0 = time.monotonic()
        r = subprocess.run(self.cluster.hosts[1].argv(argv), capture_output=True, text=True,
                           timeout=JOIN_TIMEOUT * 6 + 60)
        return r.returncode, r.stdout + r.stderr, time.monotonic() - t0

    def test_same_run_id_other_nnodes(self):
        rc, out, took = self.intruder(self.server.endpoint, "3:3",
                                      "token_file=%s,join_timeout=%d" % (self.token, JOIN_TIMEOUT))
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"(?i)nnodes|min_nodes|max_nodes")
        self.assertIn(self.run_id, out)
        self.assertLess(took, JOIN_TIMEOUT * 6 + 30, "the error came within the join timeout")

    def test_wrong_token(self):
        wrong = os.path.join(self.work, "wrong-token")
        with open(wrong, "w") as f:
            f.write("not-the-token\n")
        rc, out, _ = self.intruder(self.server.endpoint, "2:2",
                                   "token_file=%s,join_timeout=%d" % (wrong, JOIN_TIMEOUT))
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"(?i)UNAUTHENTICATED|token")
        self.assertNotIn("not-the-token", out, "the token itself is never printed")

    def test_unreachable_endpoint(self):
        # A port nothing listens on. is_host=false: a local endpoint would
        # otherwise make this launcher serve the rendezvous itself, as
        # torchrun's c10d backend does.
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
        s.close()
        rc, out, took = self.intruder("127.0.0.1:%d" % dead_port, "2:2",
                                      "is_host=false,join_timeout=%d" % JOIN_TIMEOUT)
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"(?i)unavailable|unreachable|connect")
        self.assertIn(str(dead_port), out, "the error names the endpoint")


if __name__ == "__main__":
    harness.main()
