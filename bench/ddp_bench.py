"""The DDP benchmark: what data parallelism costs a training step, and how
much of the gradients' all-reduce the backward pass hides.

At world 2 (Gloo on loopback) each model is trained with `train
--allreduce rotate`, which runs the optimizer steps in turn in three modes:
  off             no all-reduce: each rank steps on its own gradient, the
                  step time without DDP;
  after_backward  every bucket's all-reduce launched after the backward
                  pass returns: DDP with nothing hidden;
  overlap         DDP's way (the default): a bucket's all-reduce starts as
                  soon as its gradients are in, during the backward pass.
The three alternate in blocks of four steps within one run, so that a busy
machine slows them alike (separate runs differed by 15% on the same mode);
see worker/training/allreduce_mode.h for why blocks. Beside
it the Python reference (bench/reference_ddp.py, PyTorch's DDP under
torchrun, --allreduce rotate: no_sync() and DDP in blocks of four steps).

Figures, per model and round:
  <mode>/step_ms        rank 0's median batch in that mode: getting the
                        batch, forward, backward, all-reduce, optimizer
  ddp_overhead_pct      step(overlap) / step(off) - 1
  hidden_by_overlap_pct (step(after_backward) - step(overlap)) /
                        (step(after_backward) - step(off)): the share of
                        the all-reduce's cost that overlap removes
  <mode>/allreduce_ms, overlap/hidden_pct, <mode>/exposed_wait_ms
                        what `train` itself saw: the all-reduces' run time
                        a step, the share of it that ran before the backward
                        pass returned, and the wait after the backward pass.
Two numbers for "hidden", because on a machine of few cores communication
is CPU work too: an all-reduce that runs during the backward pass is hidden
in time but slows the backward pass; the step times tell the net effect.

Models: the seed's MLP (784-512-10: one 1.6 MB bucket at the default caps,
ready only with the backward pass's last gradient, so nothing to hide
behind) and a deeper one (784-512-512-512-512-10 at --bucket_cap_mb 1: four
buckets, the last one 1.6 MB).

Standalone, from the repository root:
  /usr/bin/python3 -m bench.ddp_bench --bin <bazel-bin> [--rounds 2]
In the runner: bench.py registers section_ddp (section "ddp").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench import train_bench

MODELS = {
    # name: (train/reference flags, training samples of a full and a --quick run)
    "seed_mlp": (["--hidden", "512"], 30000, 9600),
    "deep_mlp": (["--hidden", "512,512,512,512", "--bucket_cap_mb", "1"], 12000, 3840),
}
OURS_MODES = ("off", "after_backward", "overlap")


def one_round(bin_dir, model, limit, with_reference, log, failed, timeout=900):
    """One run of each implementation: {who: metrics} for those that worked;
    every failed attempt goes to failed(run, reason)."""
    flags = MODELS[model][0] + ["--allreduce", "rotate"]
    runs = [("cpptorchrun", lambda: train_bench.ours(bin_dir, 2, 1, timeout, limit, flags))]
    if with_reference:
        runs.append(("python", lambda: train_bench.reference(2, 1, timeout, limit, flags)))
    out = {}
    for who, fn in runs:
        m = train_bench.attempt_twice("%s %s" % (model, who), fn, log, failed)
        if m is None:
            continue
        out[who] = m
        log("%-9s %-12s %s; accuracy %.4f" % (model, who, ", ".join(
            "%s %.2f ms" % (mode, 1e3 * f["step_seconds_median"]) for mode, f in m["by_mode"].items()),
            m["test_accuracy"]))
    return out


def derived(runs):
    """{name: (value, unit, better)} from one round's runs."""
    fig = {}
    for who, m in runs.items():
        step = {mode: 1e3 * f["step_seconds_median"] for mode, f in m["by_mode"].items()}
        for mode, ms in step.items():
            fig["%s/%s/step_ms" % (who, mode)] = (ms, "ms", "lower")
            f = m["by_mode"][mode]
            if f.get("allreduce_timed_steps"):
                fig["%s/%s/allreduce_ms" % (who, mode)] = (
                    1e3 * f["allreduce_seconds"] / f["allreduce_timed_steps"], "ms", "lower")
                fig["%s/%s/exposed_wait_ms" % (who, mode)] = (
                    1e3 * f["comm_wait_seconds"] / f["steps"], "ms", "lower")
                if mode == "overlap" and f["allreduce_seconds"] > 0:
                    fig["%s/overlap/hidden_pct" % who] = (
                        100 * f["allreduce_hidden_seconds"] / f["allreduce_seconds"], "%", "higher")
        if "off" in step and "overlap" in step:
            fig["%s/ddp_overhead_pct" % who] = (100 * (step["overlap"] / step["off"] - 1), "%", "lower")
        if all(k in step for k in OURS_MODES) and step["after_backward"] > step["off"]:
            fig["%s/hidden_by_overlap_pct" % who] = (
                100 * (step["after_backward"] - step["overlap"]) / (step["after_backward"] - step["off"]),
                "%", "higher")
    return fig


def section_ddp(ctx, res):
    """For bench/bench.py: figures under ddp/<model>/..."""
    torch_ok = train_bench.torch_available()
    rounds = 2 if ctx.quick else 3
    for model, (flags, full, quick) in MODELS.items():
        # A torchrun run of the deep model takes ~15 s: --quick compares
        # with the reference on the seed's model only.
        reference = torch_ok and not (ctx.quick and model != "seed_mlp")
        limit = quick if ctx.quick else full
        res.note("ddp", "%s (`%s`): world 2, one epoch over the first %d samples, %d rounds" % (
            model, " ".join(flags), limit, rounds))
        for _ in range(rounds):
            runs = one_round(ctx.bin, model, limit, reference, print,
                             lambda run, reason: res.failed("ddp", run, reason))
            for name, (value, unit, better) in derived(runs).items():
                res.add("ddp/%s/%s" % (model, name), value, unit, better=better)
        summary = []
        for who in ("cpptorchrun", "python"):
            st = res.stat("ddp/%s/%s/ddp_overhead_pct" % (model, who))
            if st:
                summary.append("%s's DDP adds %.0f%% to a step" % (who, st["median"]))
        st = res.stat("ddp/%s/cpptorchrun/hidden_by_overlap_pct" % model)
        if st:
            summary.append("overlap removes %.0f%% of the all-reduce's cost" % st["median"])
        st = res.stat("ddp/%s/cpptorchrun/overlap/hidden_pct" % model)
        if st:
            summary.append("%.0f%% of the all-reduce's run time is under the backward pass" % st["median"])
        if summary:
            res.note("ddp", "%s: %s (medians)" % (model, "; ".join(summary)))
        if torch_ok and not reference:
            res.note("ddp", "%s: Python reference left out of --quick (the full run has it)" % model)
    res.note("ddp", "modes (train --allreduce rotate, in turn, 4 steps each): off = no all-reduce "
                    "(Python: no_sync()); after_backward = every all-reduce after the backward pass; "
                    "overlap = DDP's default. Definitions: bench/ddp_bench.py")
    if not torch_ok:
        res.note("ddp", "Python reference not measured: %s has no torch" % train_bench.PY)


def section_allreduce(ctx, res):
    """For bench/bench.py: the seed MLP's gradient all-reduced at world 2
    between processes of one node, shared memory against Gloo in the same run
    (worker/comm/allreduce_bench.cc: alternating blocks of 100), figures under
    allreduce/seed_mlp/<backend>/..."""
    iters = 1000 if ctx.quick else 4000
    argv = [os.path.join(ctx.bin, "worker", "comm", "allreduce_bench"), "--iters", str(iters)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not rows:
        raise RuntimeError("allreduce_bench failed: %s" % (r.stderr or r.stdout)[-800:])
    row = rows[-1]
    for backend in ("shm", "gloo"):
        for q in ("p10", "median", "p90"):
            res.add("allreduce/seed_mlp/%s/%s_ms" % (backend, q), row["%s_ms" % backend][q], "ms")
    res.note("allreduce", "the seed MLP's gradient (%d floats), world 2 on one node, %d all-reduces "
                          "(average) per backend in alternating blocks: shared memory median %.3f ms, "
                          "Gloo %.3f ms" % (row["floats"], iters, row["shm_ms"]["median"],
                                            row["gloo_ms"]["median"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="bazel-bin (of a --config=bench build)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the --quick sample counts")
    ap.add_argument("--no_reference", action="store_true")
    args = ap.parse_args()
    failures = []
    for model, (flags, full, quick) in MODELS.items():
        per_round = [derived(one_round(args.bin, model, quick if args.quick else full, not args.no_reference,
                                       print, lambda run, reason: failures.append("%s: %s" % (run, reason))))
                     for _ in range(args.rounds)]
        names = sorted({n for r in per_round for n in r})
        for name in names:
            values = [r[name][0] for r in per_round if name in r]
            print("%-9s %-40s median %8.2f  (min %.2f, max %.2f, n %d) %s" % (
                model, name, statistics.median(values), min(values), max(values), len(values),
                per_round[0].get(name, (0, ""))[1]))
    if failures:
        print("failed runs: %d\n  %s" % (len(failures), "\n  ".join(failures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
