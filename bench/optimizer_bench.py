"""The optimizers benchmark (issue 18): final test accuracy after one epoch
of the seed's MLP on Fashion-MNIST for adam, sgd, lars and lamb, each at
their default base rate, under `cpptorchrun --nproc_per_node=2 train`
(world 2, Gloo on CPU slots), at two effective batches:
  64 x 2 x 1 = 128  (--grad_accum_steps 1, no scaling), and
  64 x 2 x 8 = 1024 (--grad_accum_steps 8 --scale_lr: the rate x16 after a
                     warm-up of WARMUP optimizer steps; the epoch has ~58).
The large-batch optimizers should lose less accuracy from the first to the
second than adam and sgd do.

Standalone, from the repository root:
  /usr/bin/python3 -m bench.optimizer_bench --bin <bazel-bin> [--limit N]
In the runner: bench.py registers section_optimizers (section "optimizers").
"""
import argparse
import sys

from bench import train_bench

OPTIMIZERS = ("adam", "sgd", "lars", "lamb")
WARMUP = 10
SETTINGS = (("accum=1", ["--grad_accum_steps", "1"]),
            ("accum=8_scaled", ["--grad_accum_steps", "8", "--scale_lr", "--warmup_steps", str(WARMUP)]))
WORLD = 2


def measure(bin_dir, limit=0, timeout=900, log=print, failed=lambda run, reason: None):
    """{(optimizer, setting): metrics}, one run each, optimizers interleaved."""
    out = {}
    for setting, flags in SETTINGS:
        for opt in OPTIMIZERS:
            label = "%s %s" % (opt, setting)
            m = train_bench.attempt_twice(
                label, lambda: train_bench.ours(bin_dir, WORLD, 1, timeout, limit,
                                                ["--optimizer", opt] + flags), log, failed)
            if m is None:
                continue
            out[(opt, setting)] = m
            log("%-22s effective batch %4d, base lr %-6g accuracy %.4f, loss %.4f, %.0f samples/s" % (
                label, 64 * WORLD * int(flags[1]), m.get("base_lr", 0), m["test_accuracy"],
                m["final_loss"], m["samples_per_s"]))
    return out


def section_optimizers(ctx, res):
    """For bench/bench.py: figures under optimizers/<optimizer>/<setting>/."""
    limit = 20000 if ctx.quick else 0
    out = measure(ctx.bin, limit=limit, failed=lambda run, reason: res.failed("optimizers", run, reason))
    for (opt, setting), m in out.items():
        res.add("optimizers/%s/%s/test_accuracy" % (opt, setting), m["test_accuracy"], "fraction",
                better="higher")
    res.note("optimizers", "world %d, batch 64 per rank, one epoch%s; default base rates; "
                           "accum=8_scaled: --grad_accum_steps 8 --scale_lr --warmup_steps %d" % (
                               WORLD, " over the first %d samples (--quick)" % limit if limit else "",
                               WARMUP))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="bazel-bin (of a --config=bench build)")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N samples (0: all)")
    args = ap.parse_args()
    out = measure(args.bin, args.limit)
    print("| optimizer | effective 128 | effective 1024 (scaled) |")
    print("| --- | --- | --- |")
    for opt in OPTIMIZERS:
        cells = ["%.4f" % out[(opt, s)]["test_accuracy"] if (opt, s) in out else "failed" for s, _ in SETTINGS]
        print("| %s | %s |" % (opt, " | ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
