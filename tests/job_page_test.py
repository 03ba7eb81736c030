"""Operations, the job page: the rendezvous server's page for a live 2-node
fake-GPU job, opened in Debian's headless Chromium after a one-time login
with the token, shows every rank with its progress; after a worker hangs
(SIGSTOP) it shows the new round, the restart with its cause and the hang
with its culprit's process state. Without the token
the page shows only the login form; a run id with HTML in the address is
shown as text. CPPTORCHRUN_SCREENSHOT=path saves a screenshot of the page
after the restart (docs/job_page.png is one).
"""
import json
import os
import random
import re
import shutil
import signal
import time
import unittest
import urllib.parse

from tests import harness
from tests import jobs
from tests import ops

TRAIN = ["--epochs", "3", "--limit", "16384", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


def rank_rows(dom):
    return sorted(int(r) for r in re.findall(r'<tr class="rank" data-rank="(\d+)"', dom))


class JobPageTest(unittest.TestCase):
    def setUp(self):
        ops.need("chromium")
        self.cluster = harness.Cluster(2, use_netns=False)
        self.addCleanup(self.cluster.close)
        self.work = jobs.work_dir(self, "cpt-page-")
        self.token = "page-%016x" % random.getrandbits(64)
        self.token_file = os.path.join(self.work, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        self.run_id = "page-%06x" % random.getrandbits(24)

    def status(self):
        code, body = ops.http_get(self.url + "/api/run/" + self.run_id, token=self.token)
        return json.loads(body) if code == 200 else None

    def login_url(self, page):
        return "%s/login?token=%s&next=%s" % (self.url, self.token, urllib.parse.quote(page))

    def test_page_shows_ranks_the_restart_and_the_hang_after_a_stop(self):
        started = time.monotonic()
        h0, h1 = self.cluster.hosts
        server = jobs.RdzvServer(h0, self.work, extra=["--metrics_port", "0", "--token_file", self.token_file])
        self.url = harness.wait_for(lambda: ops.metrics_url(server.text()), 30, "the server's page port")
        conf = ["--rdzv_conf", "token_file=%s,keep_alive_interval=0.5,keep_alive_max_attempt=2,"
                "last_call_timeout=1,join_timeout=60" % self.token_file]
        jobs.Node(h0, self.work, "nodeA", server.endpoint, "2:2", nproc=1, run_id=self.run_id,
                  launcher_args=conf, train_args=TRAIN)
        b = jobs.Node(h1, self.work, "nodeB", server.endpoint, "2:2", nproc=1, run_id=self.run_id,
                      launcher_args=conf, train_args=TRAIN)
        harness.wait_for(lambda: (s := self.status()) and len(s["nodes"]) == 2 and
                         all(r["step"] > 0 for n in s["nodes"] for r in n["ranks"]) and
                         sum(len(n["ranks"]) for n in s["nodes"]) == 2, 120, "both ranks' progress", interval=0.2)
        chromium = ops.Chromium(h0, self.work)

        # Without the token: the page sends the browser to the login form.
        dom = chromium.dom("%s/run/%s" % (self.url, self.run_id))
        self.assertIn('name="token"', dom)
        self.assertEqual(rank_rows(dom), [])
        dom = chromium.dom("%s/login?token=wrong&next=/run/%s" % (self.url, self.run_id))
        self.assertIn("Wrong token", dom)

        # With it (a one-time login that sets a session cookie): every rank.
        dom = chromium.dom(self.login_url("/run/" + self.run_id))
        self.assertEqual(rank_rows(dom), [0, 1], dom)
        self.assertIn('<b id="state">active</b>', dom)
        self.assertRegex(dom, r'<polyline points="[^"]+" [^>]*class="series" data-rank="0"')
        round_before = int(re.search(r'<b id="round">(\d+)</b>', dom).group(1))

        # The run list links to the run.
        dom = chromium.dom(self.login_url("/"))
        self.assertIn('href="/run/%s"' % self.run_id, dom)

        # A run id with HTML in the address is text on the page, never markup.
        dom = chromium.dom(self.login_url("/run/<img src=x onerror=alert(1)>"))
        self.assertIn("&lt;img src=x onerror=alert(1)&gt;", dom)
        self.assertNotIn("<img", dom)

        # One of node B's workers hangs (SIGSTOP) once a checkpoint exists:
        # found hung, killed, the group restarts.
        jobs.wait_checkpoint(os.path.join(self.work, "ckpt"), timeout=120)
        victim = harness.wait_for(b.worker_pids, 30, "node B's worker")[0]
        os.kill(victim, signal.SIGSTOP)
        harness.wait_for(lambda: (s := self.status()) and s["round"] > round_before and len(s["nodes"]) == 2 and
                         any((n["last_restart"] or {}).get("cause") == "worker_failed" for n in s["nodes"]) and
                         jobs.node_fault(s, "last_hang") and
                         all(r["step"] > 0 for n in s["nodes"] for r in n["ranks"]) and
                         sum(len(n["ranks"]) for n in s["nodes"]) == 2,
                         90, "the new round with the restart and both ranks training again", interval=0.2)
        page = self.login_url("/run/" + self.run_id)
        dom = chromium.dom(page)
        self.assertEqual(rank_rows(dom), [0, 1], dom)
        self.assertIn('<tr class="restart" data-cause="worker_failed">', dom)
        self.assertIn('<tr class="fault" data-kind="hang">', dom)
        self.assertIn("stopped (T)", dom)
        self.assertGreater(int(re.search(r'<b id="round">(\d+)</b>', dom).group(1)), round_before)
        shot = chromium.screenshot(page, os.path.join(self.work, "job_page.png"))
        keep = os.environ.get("CPPTORCHRUN_SCREENSHOT")
        if keep:
            shutil.copyfile(shot, keep)
        print("job page scenario: %.1f s" % (time.monotonic() - started))


if __name__ == "__main__":
    harness.main()
