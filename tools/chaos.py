"""tools/chaos: a fake-GPU training job under fire. Starts a rendezvous
server and --nodes launchers (--nnodes 1:N) on loopback, then every
--interval seconds SIGKILLs a random worker or a random launcher (a killed
launcher is started again, as a scheduler would), for at most --duration
seconds. Then it lets the job finish and reports: kills, restarts, rounds,
final test accuracy against an undisturbed run of the same job, and the
processes of the job left behind (must be 0). Exits 1 when the job failed,
the accuracy is off by more than --tolerance, or anything was left behind.
"""
import argparse
import glob
import json
import os
import random
import signal
import sys
import tempfile
import time

from tests import harness, jobs


def start_node(cluster, i, work, server, run_id, args, name):
    """Node i of the job (on host i + 1; host 0 holds the server)."""
    conf = jobs.fast_rdzv_conf(keep_alive=0.5, attempts=2, last_call=1.0, join_timeout=120)
    train = ["--epochs", str(args.epochs), "--limit", str(args.limit), "--checkpoint_every", "8",
             "--heartbeat_interval", "0.2", "--progress", "none"]
    return jobs.Node(cluster.hosts[i + 1], work, name, server.endpoint, "1:%d" % args.nodes,
                     nproc=args.nproc, run_id=run_id, max_restarts=1000, launcher_args=conf,
                     train_args=train)


def start_job(cluster, work, server, run_id, args):
    return [start_node(cluster, i, work, server, run_id, args, "node%d" % i) for i in range(args.nodes)]


def metrics_of(nodes):
    for n in nodes:
        if os.path.exists(n.metrics):
            return jobs.read_metrics(n.metrics)
    return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=60, help="seconds of chaos (then the job finishes)")
    ap.add_argument("--interval", type=float, default=5, help="seconds between kills")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.02, help="accuracy, absolute")
    ap.add_argument("--finish_timeout", type=float, default=900)
    ap.add_argument("--work", default="",
                    help="folder for the runs' logs and checkpoints (default: a new one under $TMPDIR, kept)")
    return ap.parse_args()


def run_reference(cluster, work, server, rng, args):
    """The undisturbed run: its metrics, or None when it failed."""
    print("chaos: undisturbed reference run", flush=True)
    ref_dir = os.path.join(work, "reference")
    os.makedirs(ref_dir)
    ref_nodes = start_job(cluster, ref_dir, server, "chaos-ref-%x" % rng.getrandbits(24), args)
    for n in ref_nodes:
        if n.wait(args.finish_timeout) != 0:
            print("chaos: the reference run failed:\n" + n.text()[-3000:])
            return None
    metrics = metrics_of(ref_nodes)
    if metrics is None:
        print("chaos: the reference run wrote no metrics")
    return metrics


def fire(cluster, run_dir, server, run_id, rng, args, nodes):
    """For --duration s, or until every launcher is gone: every --interval
    s SIGKILLs a random worker (7 in 10) or a random launcher, which is
    started again. `nodes` is updated in place; returns the kills by kind."""
    kills = {"worker": 0, "launcher": 0}
    relaunches = 0
    t_start = time.monotonic()
    t_end = t_start + args.duration
    next_kill = time.monotonic() + args.interval
    while time.monotonic() < t_end and any(n.proc.poll() is None for n in nodes):
        if time.monotonic() < next_kill:
            time.sleep(0.05)  # pacing the kills, not synchronisation
            continue
        next_kill += args.interval
        i = rng.randrange(len(nodes))
        node = nodes[i]
        if node.proc.poll() is not None:
            continue
        elapsed = time.monotonic() - t_start
        if rng.random() < 0.7:
            pids = node.worker_pids()
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills["worker"] += 1
                print("chaos: t=%.1fs killed a worker of node %d" % (elapsed, i), flush=True)
        else:
            os.kill(node.proc.pid, signal.SIGKILL)
            node.proc.wait(timeout=30)
            kills["launcher"] += 1
            relaunches += 1
            print("chaos: t=%.1fs killed node %d's launcher; starting it again" % (elapsed, i), flush=True)
            nodes[i] = start_node(cluster, i, run_dir, server, run_id, args, "node%d-r%d" % (i, relaunches))
    return kills


def job_events(run_dir):
    """Every launcher's event log (launcher/agent/event_log.h) of the run, killed
    ones included: one list of dicts."""
    events = []
    for path in sorted(glob.glob(os.path.join(run_dir, "logs", "*", "events.jsonl"))):
        with open(path) as f:
            # A launcher killed mid-write may leave a partial last line.
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    return events


def report(kills, codes, events, final, reference, leftovers, tolerance):
    """Prints the chaos report; returns whether the run passed."""
    restarts = sum(1 for e in events if e["event"] == "restart" and e.get("counted"))
    rounds = max([e["round"] for e in events if e["event"] == "round_joined"] or [0])
    print("\nchaos report")
    print("  kills               : %d workers, %d launchers" % (kills["worker"], kills["launcher"]))
    print("  restarts (spent)    : %d" % restarts)
    print("  rounds              : %d" % rounds)
    print("  exit codes          : %s" % codes)
    acc = final["test_accuracy"] if final else None
    print("  test accuracy       : %s (undisturbed %.4f)" % ("%.4f" % acc if acc is not None else "n/a",
                                                        reference["test_accuracy"]))
    print("  processes left      : %d" % len(leftovers))
    ok = (all(c == 0 for c in codes) and final is not None and not leftovers
          and abs(acc - reference["test_accuracy"]) <= tolerance)
    print("  verdict             : %s" % ("PASS" if ok else "FAIL"))
    return ok


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    with harness.Cluster(args.nodes + 1, use_netns=False) as cluster:
        work = args.work or tempfile.mkdtemp(prefix="cpt-chaos-")
        os.makedirs(work, exist_ok=True)
        print("chaos: logs and checkpoints in %s" % work, flush=True)
        server = jobs.RdzvServer(cluster.hosts[0], work)
        reference = run_reference(cluster, work, server, rng, args)
        if reference is None:
            return 1

        print("chaos: the run under fire (%.0f s, a kill every %.1f s)" % (args.duration, args.interval),
              flush=True)
        run_dir = os.path.join(work, "chaos")
        os.makedirs(run_dir)
        run_id = "chaos-%x" % rng.getrandbits(24)
        nodes = start_job(cluster, run_dir, server, run_id, args)
        kills = fire(cluster, run_dir, server, run_id, rng, args, nodes)
        print("chaos: stopped killing; waiting for the job to finish", flush=True)
        codes = [n.wait(args.finish_timeout) for n in nodes]
        ok = report(kills, codes, job_events(run_dir), metrics_of(nodes), reference,
                    jobs.job_leftovers(run_id), args.tolerance)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
