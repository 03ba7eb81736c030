"""The gradient compression benchmark (issue 18): each DDP communication
hook of `train --comm_hook` beside PyTorch's own hook in the same run.

World 2 on one node, Gloo on both sides (`cpptorchrun --standalone
--nproc_per_node=2 train --backend gloo`, and bench/reference_ddp.py under
torchrun with torch's hook registered), the seed's MLP (one 1.6 MB bucket),
one short run each over the first LIMIT training samples, hooks and
implementations interleaved:
  allreduce  float32 (no hook: DDP's default);
  fp16, bf16 torch's fp16_compress_hook / bf16_compress_hook, and ours;
  powersgd   rank --powersgd_rank (1), plain all-reduce for the first
             START_ITER steps (--powersgd_start_iter), then compressed.
Figures per hook and implementation:
  bytes_per_step        the payload bytes rank 0 handed to the gradients'
                        all-reduces (count x element size), per synchronised
                        step, over the whole run (powersgd: its plain steps
                        included);
  compressed_bytes_per_step  powersgd only: the same over its compressed
                        steps alone, (bytes - START_ITER x the allreduce
                        run's bytes a step) / (steps - START_ITER);
  step_ms               rank 0's median step (batch, forward, backward,
                        all-reduce, optimizer);
  test_accuracy         on the t10k split at the end.
Bytes are counted by each side itself (train's DdpStats; the reference's
wrapper around torch's hook, bench/reference_ddp.py); they are payloads,
not wire bytes (a ring all-reduce sends 2 (w - 1) / w of each).

Standalone, from the repository root:
  /usr/bin/python3 -m bench.compression_bench --bin <bazel-bin> [--rounds 2]
In the runner: bench.py registers section_compression (section
"compression").
"""
import argparse
import statistics
import sys

from bench import train_bench

HOOKS = ("allreduce", "fp16", "bf16", "powersgd")
WORLD = 2
LIMIT = 12800  # 100 steps a rank at world 2: each run well under a minute
START_ITER = 10


def one_round(bin_dir, limit, with_reference, log, failed, timeout=300):
    """{(hook, who): metrics} of one run each; a failed run goes to
    failed(run, reason), with the error's last line."""
    out = {}
    for hook in HOOKS:
        flags = ["--comm_hook", hook, "--powersgd_start_iter", str(START_ITER)]
        runs = [("cpptorchrun", lambda: train_bench.ours(bin_dir, WORLD, 1, timeout, limit, flags))]
        if with_reference:
            runs.append(("pytorch", lambda: train_bench.reference(WORLD, 1, timeout, limit, flags)))
        for who, fn in runs:
            try:
                m = fn()
            except Exception as e:  # pylint: disable=broad-except
                text = str(e).splitlines()
                # torchrun's own ChildFailedError last: the worker's RuntimeError says why.
                lines = ([l for l in text if "RuntimeError" in l] or [l for l in text if "Error" in l]
                         or text[-1:])
                lines = lines[:1]
                failed("%s %s" % (hook, who), lines[-1][:300] if lines else "failed")
                log("%-9s %-12s failed: %s" % (hook, who, lines[-1][:200] if lines else ""))
                continue
            out[(hook, who)] = m
            log("%-9s %-12s %9.0f bytes/step, step %.2f ms, accuracy %.4f" % (
                hook, who, m["bytes_sent_per_step"], 1e3 * m["step_seconds_median"], m["test_accuracy"]))
    return out


def derived(runs):
    """{(hook, who, figure): value} from one round."""
    fig = {}
    for (hook, who), m in runs.items():
        fig[(hook, who, "bytes_per_step")] = m["bytes_sent_per_step"]
        fig[(hook, who, "step_ms")] = 1e3 * m["step_seconds_median"]
        fig[(hook, who, "test_accuracy")] = m["test_accuracy"]
        plain = runs.get(("allreduce", who))
        if hook == "powersgd" and plain and m["bytes_sent_per_step"] > 0:
            steps = m["bytes_sent"] / m["bytes_sent_per_step"]
            if steps > START_ITER:
                fig[(hook, who, "compressed_bytes_per_step")] = (
                    m["bytes_sent"] - START_ITER * plain["bytes_sent_per_step"]) / (steps - START_ITER)
    return fig


def medians(rounds):
    """{(hook, who, figure): (median, n)} over the rounds."""
    keys = sorted({k for r in rounds for k in r})
    return {k: (statistics.median([r[k] for r in rounds if k in r]), sum(k in r for r in rounds))
            for k in keys}


def table(med, failures):
    """The Markdown table: a row per hook, both implementations side by side."""
    def cell(hook, who, figure, fmt):
        v = med.get((hook, who, figure))
        if v is None:
            return "failed" if any(f.startswith("%s %s" % (hook, who)) for f in failures) else "-"
        return fmt % v[0]
    rows = ["| hook | bytes/step cpptorchrun | bytes/step PyTorch | step ms cpptorchrun | step ms PyTorch "
            "| accuracy cpptorchrun | accuracy PyTorch |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for hook in HOOKS:
        def b(who):
            text = cell(hook, who, "bytes_per_step", "%.0f")
            steady = med.get((hook, who, "compressed_bytes_per_step"))
            return text + (" (compressed steps: %.0f)" % steady[0] if steady else "")
        rows.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            hook, b("cpptorchrun"), b("pytorch"), cell(hook, "cpptorchrun", "step_ms", "%.2f"),
            cell(hook, "pytorch", "step_ms", "%.2f"), cell(hook, "cpptorchrun", "test_accuracy", "%.4f"),
            cell(hook, "pytorch", "test_accuracy", "%.4f")))
    return "\n".join(rows)


def section_compression(ctx, res):
    """For bench/bench.py: figures under compression/<hook>/<who>/..."""
    torch_ok = train_bench.torch_available()
    rounds = 1 if ctx.quick else 3
    per_round = [derived(one_round(ctx.bin, LIMIT, torch_ok, print,
                                   lambda run, reason: res.failed("compression", run, reason)))
                 for _ in range(rounds)]
    for r in per_round:
        for (hook, who, figure), value in r.items():
            better = "higher" if figure == "test_accuracy" else "lower"
            unit = {"step_ms": "ms", "test_accuracy": "fraction"}.get(figure, "bytes")
            res.add("compression/%s/%s/%s" % (hook, who, figure), value, unit, better=better)
    res.note("compression", "world %d, Gloo, the seed's MLP, one run over the first %d samples per hook "
                            "and side, %d round(s); powersgd rank 1 after %d plain steps; bytes are "
                            "all-reduce payloads a step (bench/compression_bench.py)" % (
                                WORLD, LIMIT, rounds, START_ITER))
    if not torch_ok:
        res.note("compression", "PyTorch's hooks not measured: %s has no torch" % train_bench.PY)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="bazel-bin (of a --config=bench build)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit", type=int, default=LIMIT, help="training samples a run")
    ap.add_argument("--no_reference", action="store_true")
    args = ap.parse_args()
    failures = []
    rounds = [derived(one_round(args.bin, args.limit, not args.no_reference, print,
                                lambda run, reason: failures.append("%s: %s" % (run, reason))))
              for _ in range(args.rounds)]
    print(table(medians(rounds), failures))
    if failures:
        print("failed runs: %d\n  %s" % (len(failures), "\n  ".join(failures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
