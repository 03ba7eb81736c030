"""The test cluster itself: hosts get their own addresses, reach each other
over TCP (across veths and the bridge where namespaces are allowed), and
closing the cluster leaves no namespace and no process behind."""
import os
import socket
import subprocess
import sys
import unittest

from tests import harness

SERVER = r"""
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(b"hello from " + sys.argv[1].encode())
c.close()
"""


class ClusterTest(unittest.TestCase):
    def check_cluster(self, cluster):
        a, b = cluster.hosts
        self.assertNotEqual(a.addr, b.addr)
        server = subprocess.Popen(a.argv([sys.executable, "-c", SERVER, a.addr]),
                                  stdout=subprocess.PIPE, text=True)
        cluster.procs.append(server)
        port = int(server.stdout.readline())
        client = subprocess.run(
            b.argv([sys.executable, "-c",
                    "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 10);"
                    "print(s.recv(100).decode())", a.addr, str(port)]),
            capture_output=True, text=True, timeout=30)
        self.assertEqual(client.returncode, 0, client.stderr)
        self.assertEqual(client.stdout.strip(), "hello from " + a.addr)
        server.wait(timeout=10)

    def test_loopback_cluster(self):
        with harness.Cluster(2, use_netns=False) as cluster:
            self.assertTrue(all(h.addr.startswith("127.") for h in cluster.hosts))
            self.check_cluster(cluster)

    def test_netns_cluster(self):
        ok, why = harness.netns_available()
        if not ok:
            self.skipTest("network namespaces unavailable: " + why)
        cluster = harness.Cluster(2, use_netns=True)
        names = list(cluster.namespaces)
        try:
            self.assertEqual(len(names), 3)  # bridge + 2 hosts
            self.check_cluster(cluster)
            # Each host has its own name, resolves its own name as Debian
            # does (127.0.1.1), and the other's to its address.
            a, b = cluster.hosts
            probe = subprocess.run(
                b.argv([sys.executable, "-c",
                        "import socket,sys; print(socket.gethostname(), socket.gethostbyname(sys.argv[1]),"
                        " socket.gethostbyname(socket.gethostname()))", a.name]),
                capture_output=True, text=True, timeout=30)
            self.assertEqual(probe.returncode, 0, probe.stderr)
            self.assertEqual(probe.stdout.split(), [b.name, a.addr, "127.0.1.1"])
            cluster.hosts[1].cut()
            probe = subprocess.run(
                cluster.hosts[1].argv([sys.executable, "-c",
                                       "import socket,sys; socket.create_connection((sys.argv[1], 9), 1)",
                                       cluster.hosts[0].addr]),
                capture_output=True, text=True, timeout=30)
            self.assertNotEqual(probe.returncode, 0, "a cut host still reached its peer")
        finally:
            cluster.close()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for ns in names:
            self.assertNotIn(ns, listed)
            self.assertFalse(os.path.exists("/etc/netns/" + ns), "hosts file left behind")


if __name__ == "__main__":
    harness.main()
