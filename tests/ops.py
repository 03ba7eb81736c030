"""Helpers for the operations scenarios: free ports, HTTP with the token,
Debian's prometheus on loopback, and where the servers print their metrics
ports."""
import json
import os
import re
import shutil
import socket
import subprocess
import unittest
import urllib.error
import urllib.parse
import urllib.request

from tests import harness


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url, token=None, timeout=5):
    """(status, body) of a GET, the token as a bearer header when given."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def metrics_url(log_text, pattern=r"metrics on (https?://\S+?)(?:/metrics|\s|,)"):
    """The base URL a rendezvous_server or a launcher printed for its metrics."""
    m = re.search(pattern, log_text)
    return m.group(1).rstrip(",") if m else None


def need(program):
    path = shutil.which(program)
    if not path:
        raise unittest.SkipTest("%s is not installed (tools/bootstrap installs it)" % program)
    return path


class Prometheus:
    """Debian's prometheus on loopback, scraping `targets` (host:port) every
    second with the token from `token_file`, storing in `work`."""

    def __init__(self, host, work, targets, token_file):
        binary = need("prometheus")
        self.port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: cpptorchrun\n"
                    "    authorization:\n      type: Bearer\n      credentials_file: %s\n"
                    "    static_configs:\n      - targets: [%s]\n"
                    % (token_file, ", ".join("'%s'" % t for t in targets)))
        self.log = os.path.join(work, "prometheus.log")
        self.proc = host.spawn([binary, "--config.file", config, "--storage.tsdb.path",
                                os.path.join(work, "tsdb"), "--web.listen-address",
                                "127.0.0.1:%d" % self.port, "--log.level", "warn"], log=self.log)
        harness.wait_for(self._ready, 60, "prometheus to be ready", interval=0.2)

    def _ready(self):
        if self.proc.poll() is not None:
            with open(self.log, errors="replace") as f:
                raise AssertionError("prometheus exited %s:\n%s" % (self.proc.returncode, f.read()[-3000:]))
        try:
            return http_get("http://127.0.0.1:%d/-/ready" % self.port, timeout=1)[0] == 200
        except OSError:
            return False

    def query(self, promql):
        """The instant vector's [(labels, value)] (empty: no data)."""
        status, body = http_get("http://127.0.0.1:%d/api/v1/query?query=%s"
                                % (self.port, urllib.parse.quote(promql)))
        if status != 200:
            raise AssertionError("query %r: HTTP %d %s" % (promql, status, body[:500]))
        data = json.loads(body)["data"]["result"]
        return [(r["metric"], float(r["value"][1])) for r in data]

    def scalar(self, promql):
        """The first value of `promql`, or None when it has none."""
        result = self.query(promql)
        return result[0][1] if result else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Chromium:
    """Debian's headless chromium, one page load at a time, with a profile
    of its own in `work` (removed with it)."""

    def __init__(self, host, work):
        self.binary = need("chromium")
        self.host = host
        self.work = work
        self.profile = os.path.join(work, "chromium-profile")
        self.count = 0

    def _run(self, extra, url, timeout=60):
        self.count += 1
        out = os.path.join(self.work, "chromium-%d.out" % self.count)
        proc = self.host.spawn(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             "--user-data-dir=" + self.profile, "--virtual-time-budget=4000"] + extra + [url],
            log=out, env={"HOME": self.work})
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
            raise AssertionError("chromium did not finish %s within %ds" % (url, timeout))
        with open(out, errors="replace") as f:
            return proc.returncode, f.read()

    def dom(self, url):
        """The page's DOM after its scripts ran (as --dump-dom prints it)."""
        code, text = self._run(["--dump-dom"], url)
        if code != 0 or "<html" not in text:
            raise AssertionError("chromium --dump-dom %s exited %d:\n%s" % (url, code, text[-3000:]))
        return text[text.index("<html"):]

    def screenshot(self, url, path, size="1280,1200"):
        code, text = self._run(["--screenshot=" + path, "--window-size=" + size, "--hide-scrollbars"], url)
        if code != 0 or not os.path.exists(path):
            raise AssertionError("chromium --screenshot %s exited %d:\n%s" % (url, code, text[-3000:]))
        return path
