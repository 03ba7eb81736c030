"""Hostile clients against a live 2-node job (issue 14): a Python gRPC
client that holds the token speaks proto/rendezvous.proto to the server of a
running job and tries to take it over. Each attempt must be refused with a
precise status, and the job must finish exit 0 with its real ranks and
MASTER_ADDR, no restart spent.

1. A KeepAlive that re-registers the live run one round ahead, with every
   node at group rank 0 and MASTER_ADDR 6.6.6.6 (the hijack: it used to
   restart both nodes' workers as RANK 0 against 6.6.6.6, and exit 0).
2. The next round with a real node's id, the real round's participants
   copied from RunStatus, and a signature that is not the server's.
3. A run the server does not know, re-registered from a participant list of
   100,000 nodes (it used to allocate them all).
4. A Leave in a real node's name (it would end the round for everyone)
   without that node's assignment signature; a Close of the live run
   without a participant's signature.
5. Joins of the live run id with a last round of INT64_MAX (it used to make
   every later round negative), 2^31-1 workers (a world size that wraps),
   or a node id holding terminal escapes.
6. A store flood of another run: 1 MiB values until the per-run byte
   budget refuses them; the server's RSS stays within its budget.
7. 40 spares for the full 2:2 job (they used to be able to crowd the
   survivors out of the next round), Leave and Close reasons of 1 MiB,
   and 200 sockets that connect and never speak (closed by the server's
   idle limit, here 2 s).

The attacker runs on a host of the cluster (a subprocess of this file in
that host's network namespace) and reports what it saw as JSON.
"""
import json
import os
import random
import re
import subprocess
import sys
import unittest

from tests import harness
from tests import jobs

TRAIN = ["--epochs", "1", "--limit", "12288", "--checkpoint_every", "8",
         "--heartbeat_interval", "0.2", "--progress", "lines"]


# --- the attacker (runs in a host's namespace) -------------------------------

def _status(client, run_id):
    resp, code, details = client.call("RunStatus", client.pb.RunStatusRequest(run_id=run_id))
    if code.name != "OK":
        return {"code": code.name, "details": details}
    return {"code": "OK", "round": resp.round,
            "nodes": sorted((n.participant.node_id, n.participant.host, n.participant.group_rank)
                            for n in resp.nodes), "raw": resp}


def _forged_round(client, status, round_delta, master):
    pb = client.pb
    nodes = status["raw"].nodes
    a = pb.Assignment(round=status["round"] + round_delta, group_world_size=len(nodes),
                      world_size=sum(n.participant.local_world_size for n in nodes),
                      master_addr=master, master_port=29500, signature=b"\0" * 32)
    for n in nodes:
        a.participants.add().CopyFrom(n.participant)
    return a


def attack(name, endpoint, token, run_id):
    """Sends attack `name`; returns the status code and details it got, the
    run's status before and after, and for a made-up run what the server
    says of it afterwards."""
    from tests import rdzv_wire
    client = rdzv_wire.Client(endpoint, token)
    pb = client.pb
    before = _status(client, run_id)
    report = {}
    method, req = "KeepAlive", None
    if name == "hijack":
        victim = before["raw"].nodes[0].participant
        a = _forged_round(client, before, 1, "6.6.6.6")
        for p in a.participants:
            p.group_rank, p.rank_offset = 0, 0
        req = pb.KeepAliveRequest(run_id=run_id, node_id=victim.node_id, assignment=a)
    elif name == "made_up_signature":
        victim = before["raw"].nodes[1].participant
        a = _forged_round(client, before, 1, victim.host)
        a.group_rank, a.rank_offset = victim.group_rank, victim.rank_offset
        req = pb.KeepAliveRequest(run_id=run_id, node_id=victim.node_id, assignment=a)
    elif name == "forged_leave":
        victim = before["raw"].nodes[0].participant
        method = "Leave"
        req = pb.LeaveRequest(run_id=run_id, node_id=victim.node_id, reason="forged", proof=b"\0" * 32)
    elif name == "forged_close":
        victim = before["raw"].nodes[0].participant
        method = "Close"
        req = pb.CloseRequest(run_id=run_id, reason="forged", node_id=victim.node_id, proof=b"\1" * 32)
    elif name in ("join_as_participant", "rejoin_as_participant"):
        # A Join in a participant's name: below the active round it would be
        # the lost-answer repeat (handing out the node's assignment and
        # signature); at it, a re-join that ends the round.
        victim = before["raw"].nodes[0].participant
        node = pb.NodeInfo(node_id=victim.node_id, host="10.6.6.6", local_world_size=victim.local_world_size,
                           static_node_rank=-1)
        last_round = 0 if name == "join_as_participant" else before["round"]
        method = "Join"
        req = pb.JoinRequest(run_id=run_id, node=node, options=pb.RunOptions(min_nodes=2, max_nodes=2),
                             last_round=last_round, node_secret=b"a guess")
    elif name in ("overflow_join", "huge_world", "escape_node"):
        node = pb.NodeInfo(node_id="mallory", host="10.6.6.6", local_world_size=1, static_node_rank=-1)
        last_round = 2 ** 63 - 1 if name == "overflow_join" else 0
        if name == "huge_world":
            node.local_world_size = 2 ** 31 - 1
        if name == "escape_node":
            node.node_id = "mal\x1b]0;owned\x07\nfake log line"
        method = "Join"
        req = pb.JoinRequest(run_id=run_id, node=node, options=pb.RunOptions(min_nodes=2, max_nodes=2),
                             last_round=last_round)
    elif name == "store_flood":
        scope = pb.Scope(run_id="flood-%x" % random.getrandbits(24), round=1)
        report["stored"] = 0
        for i in range(80):
            method, req = "Set", pb.SetRequest(scope=scope, key="k%d" % i, value=b"x" * (1 << 20))
            _, code, details = client.call(method, req)
            if code.name != "OK":
                break
            report["stored"] += 1
    elif name == "spare_flood":
        # Each spare's Join is held by the server; the client gives up after
        # 1 s (its call is cancelled) and the spare is dropped when silent.
        import threading
        codes = set()

        def spare(i):
            node = pb.NodeInfo(node_id="spare-%d" % i, host="10.6.6.%d" % (i + 1), local_world_size=1,
                               static_node_rank=-1)
            _, c, _ = client.call("Join", pb.JoinRequest(run_id=run_id, node=node, options=pb.RunOptions(
                min_nodes=2, max_nodes=2, keep_alive_interval_s=0.5, keep_alive_max_attempt=2)), timeout=1)
            codes.add(c.name)
        threads = [threading.Thread(target=spare, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        report["codes"] = sorted(codes)
        code, details, method = None, "", None
    elif name == "long_reasons":
        victim = before["raw"].nodes[0].participant
        codes = set()
        for method, req in (("Leave", pb.LeaveRequest(run_id=run_id, node_id=victim.node_id, reason="r" * (1 << 20))),
                            ("Close", pb.CloseRequest(run_id=run_id, reason="r" * (1 << 20)))):
            _, code, details = client.call(method, req)
            codes.add(code.name)
        report["codes"] = sorted(codes)
        method = None
    elif name == "idle_sockets":
        import socket
        import time
        host, port = endpoint.rsplit(":", 1)
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(200)]
        deadline = time.monotonic() + 60
        open_socks = list(socks)
        while open_socks and time.monotonic() < deadline:  # bounded: the server's idle limit is 2 s
            still = []
            for s in open_socks:
                s.settimeout(0.05)
                try:
                    if s.recv(1) != b"":
                        still.append(s)
                except socket.timeout:
                    still.append(s)
                except OSError:
                    pass
            open_socks = still
        report["left_open"] = len(open_socks)
        for s in socks:
            s.close()
        code, details, method = None, "", None
    elif name == "huge_unknown_run":
        n = 100000
        a = pb.Assignment(round=1, group_world_size=n, world_size=n, master_addr="6.6.6.6", master_port=1)
        for i in range(n):
            a.participants.add(node_id="n%d" % i, host="h", group_rank=i, local_world_size=1, rank_offset=i)
        req = pb.KeepAliveRequest(run_id="ghost-%x" % random.getrandbits(24), node_id="n0", assignment=a)
    else:
        raise ValueError(name)
    if name not in ("store_flood", "spare_flood", "long_reasons", "idle_sockets"):
        _, code, details = client.call(method, req, timeout=30)
    after = _status(client, run_id)
    ghost = _status(client, req.run_id) if name == "huge_unknown_run" else None
    client.close()
    strip = lambda s: {k: v for k, v in s.items() if k != "raw"} if s else s
    report.update({"code": code.name if code is not None else None, "details": details,
                   "before": strip(before), "after": strip(after), "ghost": strip(ghost)})
    return report


# --- the scenario ------------------------------------------------------------

class HostileClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            import grpc  # noqa: F401  (Debian's python3-grpcio, from tools/bootstrap)
        except ImportError as e:
            raise unittest.SkipTest("needs python3-grpcio (tools/bootstrap installs it): %s" % e)
        cls.cluster = harness.Cluster(4)
        cls.work = jobs.work_dir(cls, "cpt-hostile-")
        cls.token = "s3cret-%x" % random.getrandbits(64)
        token_file = os.path.join(cls.work, "token")
        with open(token_file, "w") as f:
            f.write(cls.token + "\r\n")  # CRLF: the same token for every reader
        os.chmod(token_file, 0o600)
        cls.server = jobs.RdzvServer(cls.cluster.hosts[0], cls.work,
                                     extra=["--token_file", token_file, "--max_connection_idle", "2"])
        cls.run_id = "hostile-%06x" % random.getrandbits(24)
        conf = ["--rdzv_conf", "token_file=%s,last_call_timeout=1" % token_file, "--no_python"]
        # Each worker trains, then stays (its round standing) until the
        # attacks are over: the test's go-ahead file.
        cls.go = os.path.join(cls.work, "go")
        hold = ['/bin/sh', '-c', '"$0" "$@"; rc=$?; while [ ! -e "$HOSTILE_GO" ]; do sleep 0.05; done; exit $rc']
        cls.nodes = []
        for i in (1, 2):
            metrics = os.path.join(cls.work, "node%d-metrics.json" % i)
            train = [harness.binary(jobs.TRAIN), "--checkpoint_dir", os.path.join(cls.work, "ckpt"),
                     "--metrics_json", metrics] + TRAIN
            cls.nodes.append(jobs.Node(cls.cluster.hosts[i], cls.work, "node%d" % i, cls.server.endpoint, "2:2",
                                       run_id=cls.run_id, launcher_args=conf, program=hold + train,
                                       env={"HOSTILE_GO": cls.go}))
        harness.wait_for(lambda: all(n.joined(world_size=4) for n in cls.nodes), 120,
                         "the running job's first round")

    @classmethod
    def tearDownClass(cls):
        if not hasattr(cls, "cluster"):
            return
        try:
            with open(cls.go, "w") as f:
                f.write("go\n")
            for n in cls.nodes:
                rc = n.wait(600)
                assert rc == 0, n.text()[-3000:]
            metrics = [n.metrics for n in cls.nodes if os.path.exists(n.metrics)]
            assert len(metrics) == 1, metrics
            m = jobs.read_metrics(metrics[0])
            assert m["world_size"] == 4 and m["restart_count"] == 0, m
            addrs = {cls.cluster.hosts[1].addr, cls.cluster.hosts[2].addr}
            for n in cls.nodes:
                text, joined = n.text(), jobs.named(n.events(), "round_joined")
                assert [e["round"] for e in joined] == [1], "the job was disturbed: %s" % joined
                # Anywhere in what the node printed, its workers' output included.
                assert "6.6.6.6" not in text, "a forged MASTER_ADDR reached a node:\n" + text[-3000:]
                masters = {e["master_addr"] for e in joined if e["world_size"] == 4}
                assert len(masters) == 1 and masters <= addrs, masters
        finally:
            cls.cluster.close()

    def run_attack(self, name):
        """Runs attack `name` on host 3 (not a node of the job); its report."""
        attacker = self.cluster.hosts[3]
        argv = ["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                "-m", "tests.hostile_client_test", "--attack", name, self.server.endpoint, self.token,
                self.run_id]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        r = subprocess.run(attacker.argv(argv), capture_output=True, text=True, timeout=120, cwd=root)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        report = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(report["before"]["code"], "OK", report)
        # The job is untouched: the same round, nodes, hosts and ranks.
        self.assertEqual(report["after"], report["before"])
        return report

    def test_hijack_one_round_ahead_is_refused(self):
        report = self.run_attack("hijack")
        self.assertEqual(report["code"], "PERMISSION_DENIED", report)
        self.assertIn("not issued by this server", report["details"])

    def test_plausible_round_with_a_made_up_signature_is_refused(self):
        report = self.run_attack("made_up_signature")
        self.assertEqual(report["code"], "PERMISSION_DENIED", report)

    def test_leave_in_a_nodes_name_is_refused(self):
        report = self.run_attack("forged_leave")
        self.assertEqual(report["code"], "PERMISSION_DENIED", report)
        self.assertIn("assignment signature", report["details"])

    def test_close_without_a_participants_signature_is_refused(self):
        report = self.run_attack("forged_close")
        self.assertEqual(report["code"], "PERMISSION_DENIED", report)

    def test_join_in_a_participants_name_is_refused(self):
        for attack in ("join_as_participant", "rejoin_as_participant"):
            report = self.run_attack(attack)
            self.assertEqual(report["code"], "PERMISSION_DENIED", report)
            self.assertIn("node_secret", report["details"])

    def test_joins_with_overflowing_or_unprintable_fields_are_refused(self):
        for attack, says in (("overflow_join", "last_round"), ("huge_world", "max_local_world_size"),
                             ("escape_node", "control character")):
            report = self.run_attack(attack)
            self.assertEqual(report["code"], "INVALID_ARGUMENT", report)
            self.assertIn(says, report["details"])
        # (last_round 2^63-1 is beyond kMaxLastRound; smaller huge values are
        # accepted but cannot push the numbering out of reach: rules_test.)
        self.assertNotIn("owned", self.server.text(), "no escape sequence reached the server's log")

    def test_store_flood_stops_at_the_run_budget_and_the_server_stays_small(self):
        report = self.run_attack("store_flood")
        self.assertEqual(report["code"], "RESOURCE_EXHAUSTED", report)
        self.assertIn("max_store_bytes_per_run", report["details"])
        self.assertGreaterEqual(report["stored"], 60)  # 64 MiB of 1 MiB values, less keys' bytes
        with open("/proc/%d/status" % self.server.proc.pid) as f:
            rss_kb = int(next(l for l in f if l.startswith("VmRSS:")).split()[1])
        print("rendezvous_server RSS after the attacks: %.1f MiB" % (rss_kb / 1024.0))
        # Its store budget (1 GiB) and gRPC's quota (512 MiB) bound it; after
        # one run's 64 MiB it is far below either.
        self.assertLess(rss_kb, 512 * 1024)

    def test_spares_wait_without_touching_the_round(self):
        report = self.run_attack("spare_flood")
        # Each spare's held Join ends at its client's 1 s deadline.
        self.assertEqual(report["codes"], ["DEADLINE_EXCEEDED"], report)

    def test_megabyte_reasons_are_refused(self):
        report = self.run_attack("long_reasons")
        self.assertEqual(report["codes"], ["INVALID_ARGUMENT"], report)

    def test_sockets_that_never_speak_are_closed(self):
        report = self.run_attack("idle_sockets")
        self.assertEqual(report["left_open"], 0, report)

    def test_huge_participant_list_for_an_unknown_run_is_refused(self):
        report = self.run_attack("huge_unknown_run")
        self.assertIn(report["code"], ("PERMISSION_DENIED", "RESOURCE_EXHAUSTED"), report)
        self.assertEqual(report["ghost"]["code"], "NOT_FOUND", "a refused re-registration leaves no run")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--attack":
        print(json.dumps(attack(*sys.argv[2:6])))
    else:
        harness.main()
