"""Connection-level abuse of the rendezvous server (issue 14), each followed
by a real client call that must succeed:

1. Out of file descriptors: the server runs with RLIMIT_NOFILE 64 (prlimit)
   and a client opens 100 connections. gRPC 1.51's own listener stopped
   accepting for good after one EMFILE; the server's accept loop sheds the
   connections it cannot take, says so, and serves again once they close.
2. Idle and half-open sockets (connected, never speaking HTTP/2, the
   slowloris shape) are closed by the server after --max_connection_idle.

The client is this process on loopback (the cluster's loopback hosts).
"""
import os
import socket
import subprocess
import time
import unittest

from tests import harness
from tests import jobs


class ConnectionLimitsTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(1, use_netns=False)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-conn-")
        self.host = self.cluster.hosts[0]

    def status_ok(self, server):
        """A real call: `cpptorchrun status` for a run nobody has (NOT_FOUND
        is an answer: the server is serving)."""
        r = subprocess.run([harness.binary(jobs.LAUNCHER), "status", "--rdzv_endpoint", server.endpoint,
                            "--rdzv_id", "nobody"], capture_output=True, text=True, timeout=60)
        return "unknown to this server" in r.stderr or r.returncode == 0

    def open_connections(self, server, n):
        socks = []
        for _ in range(n):
            s = socket.create_connection((self.host.addr, server.port), timeout=5)
            socks.append(s)
        return socks

    def test_out_of_descriptors_sheds_and_recovers(self):
        server = jobs.RdzvServer(self.host, self.work, wrapper=["prlimit", "--nofile=64:64"])
        self.assertTrue(self.status_ok(server))
        socks = self.open_connections(server, 100)
        # The server reached its limit and shed connections (it says so).
        harness.wait_for(lambda: "shedding new connections" in server.text(), 30, "the server to shed")
        # The kernel accepted them all into the backlog; shed ones are closed
        # by the server: reading them gives EOF (or a reset).
        closed = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        self.assertGreater(closed, 0, "some connections were shed")
        for s in socks:
            s.close()
        # Descriptors free again: the server serves new clients.
        harness.wait_for(lambda: self.status_ok(server), 60, "a real call to succeed after the flood")
        self.assertIsNone(server.proc.poll(), "the server is still running")

    def test_idle_and_half_open_connections_are_closed(self):
        server = jobs.RdzvServer(self.host, self.work, extra=["--max_connection_idle", "1"])
        silent = socket.create_connection((self.host.addr, server.port), timeout=5)
        preface_only = socket.create_connection((self.host.addr, server.port), timeout=5)
        preface_only.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

        def closed_by_server(s):
            s.settimeout(0.5)
            try:
                while True:
                    data = s.recv(4096)
                    if data == b"":
                        return True
            except socket.timeout:
                return False
            except OSError:
                return True

        harness.wait_for(lambda: closed_by_server(silent), 60, "the silent socket to be closed")
        harness.wait_for(lambda: closed_by_server(preface_only), 60, "the idle connection to be closed")
        silent.close()
        preface_only.close()
        self.assertTrue(self.status_ok(server))


if __name__ == "__main__":
    harness.main()
