"""The hierarchical all-reduce across nodes: 2 nodes x 2 CPU workers, each
node a network namespace of its own (veths and a bridge; loopback addresses
where namespaces are not allowed), the rendezvous server on a third host.
The same training runs with `train --backend hierarchical` (shared memory
within a node, Gloo between the two nodes' leaders) and `--backend gloo`
(flat Gloo among the four ranks), alternating, so that a busy machine slows
both alike. Figures per backend and run, from rank 0's metrics:
  samples_per_s   training throughput of the whole job
  allreduce_ms    the all-reduces' run time per step (what `train` saw)
  step_ms         rank 0's median step
  test_accuracy   after the run (the two must agree)
Standalone, from the repository root (root, for the namespaces):
  /usr/bin/python3 -m bench.hierarchical_bench --bin <bazel-bin> [--rounds 2]
In the runner: bench.py registers section_hierarchical ("hierarchical").
"""
import argparse
import os
import shutil
import statistics
import tempfile

from tests import harness
from tests import jobs

BACKENDS = ("hierarchical", "gloo")


def one_run(cluster, work, backend, limit, timeout=600):
    """rank 0's metrics of one 2 x 2 run with `backend`, or raises."""
    run_dir = tempfile.mkdtemp(prefix="run-", dir=work)
    server = jobs.RdzvServer(cluster.hosts[0], run_dir)
    train = ["--epochs", "1", "--limit", str(limit), "--backend", backend, "--progress", "none"]
    run_id = "hier-bench-%s" % os.path.basename(run_dir)
    nodes = [jobs.Node(cluster.hosts[i], run_dir, "node%d" % i, server.endpoint, "2:2",
                       run_id=run_id, train_args=train, fake_gpus=False,
                       launcher_args=jobs.fast_rdzv_conf(last_call=0.2))
             for i in (1, 2)]
    try:
        for n in nodes:
            rc = n.wait(timeout)
            if rc != 0:
                raise RuntimeError("%s with --backend %s exited %d: %s"
                                   % (n.name, backend, rc, n.text()[-1500:]))
        paths = [n.metrics for n in nodes if os.path.exists(n.metrics)]
        if len(paths) != 1:
            raise RuntimeError("expected one metrics file (rank 0's), found %d" % len(paths))
        return jobs.read_metrics(paths[0])
    finally:
        server.kill()


def figures(m):
    """{name: (value, unit, better)} of one run's metrics."""
    fig = {"samples_per_s": (m["samples_per_s"], "samples/s", "higher"),
           "step_ms": (1e3 * m["step_seconds_median"], "ms", "lower"),
           "test_accuracy": (m["test_accuracy"], "", "higher")}
    if m.get("allreduce_timed_steps"):
        fig["allreduce_ms"] = (1e3 * m["allreduce_seconds"] / m["allreduce_timed_steps"], "ms", "lower")
    return fig


def measure(bin_dir, rounds, limit, add, log=print):
    """Alternating runs; add(backend, name, value, unit, better) per figure."""
    os.environ["CPPTORCHRUN_BIN_DIR"] = bin_dir
    # Namespaced hosts where they can be made, else loopback addresses (the
    # section says which it measured).
    with harness.Cluster(3, use_netns=harness.netns_available()[0]) as cluster:
        work = tempfile.mkdtemp(prefix="cpt-bench-hier-")
        try:
            for r in range(rounds):
                order = BACKENDS if r % 2 == 0 else tuple(reversed(BACKENDS))
                for backend in order:
                    m = one_run(cluster, work, backend, limit)
                    if m.get("backend") != backend:
                        raise RuntimeError("asked for %s, train used %s" % (backend, m.get("backend")))
                    for name, (value, unit, better) in figures(m).items():
                        add(backend, name, value, unit, better)
                    log("hierarchical bench round %d %-12s %.0f samples/s, all-reduce %.2f ms/step, "
                        "accuracy %.4f" % (r, backend, m["samples_per_s"],
                                           figures(m).get("allreduce_ms", (0,))[0], m["test_accuracy"]))
            return cluster.netns
        finally:
            shutil.rmtree(work, ignore_errors=True)


def section_hierarchical(ctx, res):
    """For bench/bench.py: figures under hierarchical/<backend>/..."""
    rounds = 2 if ctx.quick else 4
    limit = 9600 if ctx.quick else 30000
    netns = measure(ctx.bin, rounds, limit,
                    lambda b, n, v, u, better: res.add("hierarchical/%s/%s" % (b, n), v, u, better=better))
    ours = res.stat("hierarchical/hierarchical/samples_per_s")
    flat = res.stat("hierarchical/gloo/samples_per_s")
    where = "network namespaces" if netns else "loopback addresses (no namespaces here)"
    res.note("hierarchical", "2 nodes x 2 CPU workers (%s), seed MLP, one epoch over %d samples, "
                             "%d runs per backend alternating" % (where, limit, rounds))
    if ours and flat:
        res.note("hierarchical", "hierarchical %.0f samples/s against flat Gloo %.0f (%.2fx, medians)"
                 % (ours["median"], flat["median"], ours["median"] / flat["median"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="bazel-bin of a --config=bench build")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=9600)
    args = ap.parse_args()
    got = {}
    measure(args.bin, args.rounds, args.limit,
            lambda b, n, v, u, better: got.setdefault((b, n), []).append(v))
    for (b, n), values in sorted(got.items()):
        print("%-13s %-14s median %.4g  (%s)" % (b, n, statistics.median(values),
                                                 ", ".join("%.4g" % v for v in values)))


if __name__ == "__main__":
    main()
