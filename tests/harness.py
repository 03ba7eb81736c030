"""Test harness for multi-process and multi-node scenarios.

A `Cluster` is a set of hosts, each with its own address:
  * where the machine allows it (root, `ip`), one network namespace per host,
    wired by veth pairs to a bridge that lives in a namespace of its own, with
    addresses in 198.18.0.0/24 (RFC 2544's range for test networks); each
    host has its own hostname (a UTS namespace per process started there:
    h0, h1, ...) and its own /etc/hosts (/etc/netns/<ns>/hosts, which `ip
    netns exec` mounts), written as Debian writes one: the host's own name
    on 127.0.1.1, the other hosts' names on their addresses;
  * asked for explicitly (use_netns=False: a test about one machine's
    addresses), hosts on loopback addresses 127.0.<k>.<n>.
A cluster that needs namespaces where none can be made skips its test with
the reason (unittest.SkipTest), so the run counts it skipped; it never falls
back to loopback silently.
Everything the cluster makes it removes again (`close`, or `with Cluster()`),
and every process it starts is killed and reaped at the end.

Processes started here are bounded: every wait has a timeout, and nothing is
synchronised with sleeps; `wait_for` polls a condition until a deadline.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "cpptorchrun")


def binary(label_path):
    """Path to a built binary given 'launcher/cpptorchrun'-style paths: from
    $CPPTORCHRUN_BIN_DIR (a bazel-bin), else the test's runfiles."""
    bases = [os.environ.get("CPPTORCHRUN_BIN_DIR", ""), os.path.join(RUNFILES, WORKSPACE), os.getcwd()]
    for base in [b for b in bases if b]:
        p = os.path.join(base, label_path)
        if os.path.exists(p):
            return os.path.abspath(p)
    raise FileNotFoundError("binary not found in runfiles: " + label_path)


def _xml_escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def wait_for(condition, timeout, what, interval=0.02):
    """Polls `condition()` until it returns a truthy value or `timeout` s pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def throttle(pid, seconds, stop=lambda: False):
    """A CPU quota of one third for `pid`, as a cgroup's would throttle it:
    stopped 100 ms of every 150 ms (SIGSTOP, SIGCONT), for at most
    `seconds` or until stop(); it is left running. The sleeps are the
    fault's own timing, not a synchronisation."""
    until = time.monotonic() + seconds
    try:
        while time.monotonic() < until and not stop():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.1)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
    except ProcessLookupError:
        pass
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def netns_available():
    """(True, '') when network namespaces can be made here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root (running as uid %d)" % os.geteuid()
    if not shutil.which("ip"):
        return False, "the 'ip' command (iproute2) is not installed"
    name = "cpt-probe-%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return False, "'ip netns add' failed: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return True, ""


class Host:
    def __init__(self, cluster, name, addr, netns):
        self.cluster = cluster
        self.name = name
        self.addr = addr
        self.netns = netns

    def argv(self, argv):
        if self.netns:
            # Its own hostname, as a real host has.
            return (["ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c",
                     'hostname "$0" && exec "$@"', self.name] + list(argv))
        return list(argv)

    def spawn(self, argv, log=None, env=None, **kw):
        """Starts a process on this host in its own session; output to `log`."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        out = open(log, "wb") if log else subprocess.DEVNULL
        p = subprocess.Popen(self.argv(argv), stdout=out, stderr=subprocess.STDOUT,
                             env=full_env, start_new_session=True, **kw)
        if log:
            out.close()
        self.cluster.procs.append(p)
        return p

    def cut(self):
        """Cuts this host off the network (its veth goes down)."""
        if not self.netns:
            raise RuntimeError("cut() needs network namespaces")
        _ip(["netns", "exec", self.netns, "ip", "link", "set", "eth0", "down"])


def _ip(args):
    r = subprocess.run(["ip"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))


class Cluster:
    """`n` hosts: one network namespace each (the test is skipped, with why,
    where none can be made), or with use_netns=False loopback addresses."""

    def __init__(self, n, use_netns=True):
        self.procs = []
        self.hosts = []
        self.namespaces = []
        self.etc_folders = []
        self.tag = "%x" % random.getrandbits(24)
        ok, why = netns_available() if use_netns else (False, "not asked for")
        if use_netns and not ok:
            import unittest
            raise unittest.SkipTest("a test of hosts with their own addresses and names needs network "
                                    "namespaces: " + why)
        self.netns = ok
        self.why_not_netns = why
        self.tmp = tempfile.mkdtemp(prefix="cpt-cluster-")
        try:
            if self.netns:
                self._make_namespaces(n)
            else:
                sub = random.randint(1, 250)
                for i in range(n):
                    self.hosts.append(Host(self, "h%d" % i, "127.0.%d.%d" % (sub, i + 1), None))
        except Exception:
            self.close()
            raise

    def _make_namespaces(self, n):
        br = "cpt-%s-br" % self.tag
        _ip(["netns", "add", br])
        self.namespaces.append(br)
        _ip(["netns", "exec", br, "ip", "link", "set", "lo", "up"])
        _ip(["netns", "exec", br, "ip", "link", "add", "br0", "type", "bridge"])
        _ip(["netns", "exec", br, "ip", "link", "set", "br0", "up"])
        for i in range(n):
            ns = "cpt-%s-h%d" % (self.tag, i)
            _ip(["netns", "add", ns])
            self.namespaces.append(ns)
            peer = "v%s%d" % (self.tag, i)
            _ip(["link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _ip(["link", "set", peer, "netns", br])
            _ip(["netns", "exec", br, "ip", "link", "set", peer, "master", "br0"])
            _ip(["netns", "exec", br, "ip", "link", "set", peer, "up"])
            addr = "198.18.0.%d" % (i + 1)
            _ip(["netns", "exec", ns, "ip", "addr", "add", addr + "/24", "dev", "eth0"])
            _ip(["netns", "exec", ns, "ip", "link", "set", "eth0", "up"])
            _ip(["netns", "exec", ns, "ip", "link", "set", "lo", "up"])
            self.hosts.append(Host(self, "h%d" % i, addr, ns))
        for host in self.hosts:
            folder = os.path.join("/etc/netns", host.netns)
            os.makedirs(folder, exist_ok=True)
            self.etc_folders.append(folder)
            lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
                     "127.0.1.1 %s" % host.name]
            lines += ["%s %s" % (h.addr, h.name) for h in self.hosts if h is not host]
            with open(os.path.join(folder, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self.namespaces):
            # Kill whatever still runs in the namespace before deleting it.
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces = []
        for folder in self.etc_folders:
            shutil.rmtree(folder, ignore_errors=True)
        self.etc_folders = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def processes_with_env(key, value):
    """Pids of live processes whose environment holds key=value."""
    needle = ("%s=%s" % (key, value)).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if state != "Z" and needle in env:
            pids.append(int(d))
    return pids


def read_json(path):
    with open(path) as f:
        return json.load(f)


class _XmlResult:
    """Collects unittest outcomes for a JUnit XML file (XML_OUTPUT_FILE)."""

    def __init__(self):
        self.cases = []

    def write(self, path, suite):
        fails = sum(1 for c in self.cases if c[1] in ("failure", "error"))
        skips = sum(1 for c in self.cases if c[1] == "skipped")
        with open(path, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n')
            f.write('<testsuite name="%s" tests="%d" failures="%d" errors="0" skipped="%d">\n'
                    % (_xml_escape(suite), len(self.cases), fails, skips))
            for name, outcome, text in self.cases:
                if outcome == "ok":
                    f.write('<testcase name="%s"/>\n' % _xml_escape(name))
                elif outcome == "skipped":
                    f.write('<testcase name="%s" result="skipped"><skipped message="%s"/></testcase>\n'
                            % (_xml_escape(name), _xml_escape(text)))
                else:
                    f.write('<testcase name="%s"><failure message="%s"/></testcase>\n'
                            % (_xml_escape(name), _xml_escape(text[-2000:])))
            f.write("</testsuite>\n</testsuites>\n")


def main():
    """unittest.main, plus a JUnit XML file that counts each case (and why it skipped)."""
    import unittest

    class Result(unittest.TextTestResult):
        xml = _XmlResult()

        def addSuccess(self, test):
            super().addSuccess(test)
            self.xml.cases.append((test.id(), "ok", ""))

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self.xml.cases.append((test.id(), "failure", self._exc_info_to_string(err, test)))

        def addError(self, test, err):
            super().addError(test, err)
            self.xml.cases.append((test.id(), "error", self._exc_info_to_string(err, test)))

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self.xml.cases.append((test.id(), "skipped", reason))

    runner = unittest.TextTestRunner(verbosity=2, resultclass=Result)
    program = unittest.main(module="__main__", testRunner=runner, exit=False)
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        Result.xml.write(xml, os.environ.get("TEST_TARGET", "scenario"))
    sys.exit(0 if program.result.wasSuccessful() else 1)
