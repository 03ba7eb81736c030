"""The Python reference for the training benchmark: the seed's listing
(chapter 1, "How Data Parallelism Works") as written, with Gloo instead of
NCCL (this machine has no GPU), run under torchrun.

Same model (Linear(784, 512), ReLU, Linear(512, 10)), DDP, DistributedSampler
with set_epoch, a DataLoader of batch 64, Adam 1e-3, cross-entropy; the same
Fashion-MNIST IDX files as `train` (read with gzip + numpy instead of
torchvision, scaled to [0, 1] as ToTensor does; inflated copies cached
as train caches them, --data_cache). Rank 0 writes the same
figures as `train --metrics_json`: the job's samples/s over the training
loop, and the t10k accuracy.

For the recovery benchmark it also checkpoints and resumes, as `train`
does: with --checkpoint_dir, rank 0 saves the model, the optimizer and the
position every --checkpoint_every steps (written to a temporary file, then
renamed); a restarted group loads the newest, prints "resumed from
checkpoint at step N", skips the batches the epoch already had, and prints
its first step.

For the DDP benchmark, --hidden gives other hidden widths, --bucket_cap_mb
DDP's bucket cap, and --allreduce off runs every step under no_sync() (each
rank trains on its own: the step time without DDP's all-reduce), rotate
in blocks of four steps with and without.

For the compression benchmark, --comm_hook registers torch's own DDP
communication hook: allreduce (none: DDP's default), fp16
(default_hooks.fp16_compress_hook), bf16 (bf16_compress_hook) or powersgd
(powerSGD_hook.powerSGD_hook with a PowerSGDState of --powersgd_rank and
--powersgd_start_iter, error feedback and warm start on, as torch's
defaults). A thin wrapper counts the payload bytes each bucket's
all-reduces carry, as `train` counts them (count x element size): the
bucket's elements x 4 (allreduce, and PowerSGD before its start step), x 2
(fp16, bf16); for PowerSGD's compressed steps, from the bucket's gradient
shapes and torch's own rule (_should_compress): the uncompressed
tensors' elements plus, per compressed n x m matrix at rank r, n r (P)
and m r (Q), x 4. The metrics JSON gains comm_hook, bytes_sent and
bytes_sent_per_step (rank 0's).

    /usr/bin/python3 bench/torchrun_ref.py --standalone --nproc_per_node=2 \
        bench/reference_ddp.py --epochs 1 --metrics_json /tmp/ref.json
"""
import argparse
import contextlib
import gzip
import hashlib
import json
import os
import resource
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def default_cache_dir():
    """train's default (worker/data/data_file.h): $CPPTORCHRUN_CACHE_DIR, else
    $XDG_CACHE_HOME/cpptorchrun, else ~/.cache/cpptorchrun; "" when none."""
    if os.environ.get("CPPTORCHRUN_CACHE_DIR"):
        return os.environ["CPPTORCHRUN_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "cpptorchrun")
    return os.path.join(os.environ["HOME"], ".cache", "cpptorchrun") if os.environ.get("HOME") else ""


def read_file(path, cache_dir):
    """The file's bytes, a gzip file inflated; as train does, through a cache
    of inflated copies keyed by the file's identity (path, device, inode,
    size, mtime), so a restarted worker does not inflate it again."""
    if not path.endswith(".gz"):
        with open(path, "rb") as f:
            return f.read()
    st = os.stat(path)
    key = hashlib.sha256(("%s|%d|%d|%d|%d" % (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size,
                                              st.st_mtime_ns)).encode()).hexdigest()[:32]
    cached = os.path.join(cache_dir, "reference-%s.raw" % key) if cache_dir else ""
    if cached and os.path.exists(cached):
        with open(cached, "rb") as f:
            return f.read()
    with gzip.open(path, "rb") as f:
        data = f.read()
    if cached:
        try:
            os.makedirs(cache_dir, exist_ok=True)
            with open(cached + ".%d.tmp" % os.getpid(), "wb") as f:
                f.write(data)
            os.replace(cached + ".%d.tmp" % os.getpid(), cached)
        except OSError:
            pass  # best effort, as train's
    return data


def read_idx(path, cache_dir=""):
    data = read_file(path, cache_dir)
    magic = int.from_bytes(data[0:4], "big")
    dims = magic & 0xFF
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split, cache_dir=""):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), cache_dir)
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), cache_dir)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).view(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    return TensorDataset(x, y)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--data_cache", default=default_cache_dir(),
                        help="folder for inflated copies of the gzip files, as train's --data_cache")
    parser.add_argument("--metrics_json", default="")
    parser.add_argument("--limit", type=int, default=0, help="train on the first N samples (0: all)")
    parser.add_argument("--checkpoint_dir", default="")
    parser.add_argument("--checkpoint_every", type=int, default=0, help="steps between checkpoints")
    parser.add_argument("--hidden", default="512", help="hidden layer widths, comma-separated")
    parser.add_argument("--bucket_cap_mb", type=float, default=25)
    parser.add_argument("--allreduce", choices=("overlap", "off", "rotate"), default="overlap",
                        help="off: every step under DDP's no_sync() (no all-reduce); rotate: off and "
                             "overlap in blocks of 4 steps (the DDP benchmark's A/B within one run)")
    parser.add_argument("--comm_hook", choices=("allreduce", "fp16", "bf16", "powersgd"),
                        default="allreduce", help="torch's DDP communication hook")
    parser.add_argument("--powersgd_rank", type=int, default=1)
    parser.add_argument("--powersgd_start_iter", type=int, default=10)
    return parser.parse_args()


class ByteCount:
    """The payload bytes the hook's all-reduces carry (see the top)."""

    def __init__(self):
        self.bytes = 0


def powersgd_bytes(state, bucket):
    """Bytes of one bucket's PowerSGD all-reduces at state's current step."""
    if state.iter < state.start_powerSGD_iter:
        return bucket.buffer().numel() * 4
    elements = 0
    for tensor in bucket.gradients():
        n = tensor.shape[0]
        m = tensor.numel() // n
        rank = min(n, m, state.matrix_approximation_rank)
        if powerSGD_hook._should_compress(n, m, rank, state.min_compression_rate)[0]:
            elements += (n + m) * rank
        else:
            elements += tensor.numel()
    return elements * 4


def register_comm_hook(args, model, count):
    """Registers torch's hook named by --comm_hook on `model`, counting bytes into `count`."""
    if args.comm_hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.powersgd_start_iter)

        def hook(state, bucket):
            count.bytes += powersgd_bytes(state, bucket)
            return powerSGD_hook.powerSGD_hook(state, bucket)
        model.register_comm_hook(state, hook)
        return
    if args.comm_hook == "allreduce":
        torch_hook, size = default_hooks.allreduce_hook, 4
    else:
        torch_hook = getattr(default_hooks, args.comm_hook + "_compress_hook", None)
        if torch_hook is None:
            raise SystemExit("this torch has no %s_compress_hook" % args.comm_hook)
        size = 2

    def counted(state, bucket):
        count.bytes += bucket.buffer().numel() * size
        return torch_hook(state, bucket)
    model.register_comm_hook(None, counted)


def build_model(hidden, bucket_cap_mb):
    """The MLP 784-<hidden>-10 under DDP; each process builds the SAME model."""
    widths = [784] + [int(w) for w in hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return DDP(nn.Sequential(*layers), bucket_cap_mb=bucket_cap_mb)


class Checkpoint:
    """Rank 0's checkpoint (model, optimizer, position) in --checkpoint_dir,
    written to a temporary file and renamed; nothing without a folder."""

    def __init__(self, folder, rank, model, optimizer):
        self.folder, self.rank, self.model, self.optimizer = folder, rank, model, optimizer
        self.path = os.path.join(folder, "checkpoint.pt") if folder else ""

    def load(self):
        """(epoch, batches into it, step) to start from: the saved position, else zeros."""
        if not self.path or not os.path.exists(self.path):
            return 0, 0, 0
        state = torch.load(self.path)
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.rank == 0:
            print("resumed from checkpoint at step %d" % state["step"], flush=True)
        return state["epoch"], state["batches"], state["step"]

    def save(self, epoch, batches, step):
        if self.rank != 0 or not self.path:
            return
        os.makedirs(self.folder, exist_ok=True)
        torch.save({"model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "epoch": epoch, "batches": batches, "step": step}, self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Stats:
    """What the training loop measured on this rank."""

    def __init__(self):
        self.samples = 0
        self.batches_run = 0
        self.step_times = []  # each batch's: its fetch, forward, backward, all-reduce, step
        self.mode_times = {}  # the same, per all-reduce mode
        self.loss = None
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.synced_steps = 0


def train(args, model, optimizer, dataset, sampler, rank, checkpoint):
    """The epochs from the checkpoint's position on; returns Stats."""
    start_epoch, skip_batches, step = checkpoint.load()
    stats = Stats()
    cpu_start = cpu_seconds()
    start = time.perf_counter()
    first = True
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        # A resumed epoch goes on where the checkpoint left it (same world).
        indices = list(sampler)[skip_batches * 64:] if epoch == start_epoch else sampler
        loader = DataLoader(dataset, batch_size=64, sampler=indices)
        batches = skip_batches if epoch == start_epoch else 0
        step_start = time.perf_counter()
        for X, y in loader:
            # rotate: blocks of 4 steps, as `train --allreduce rotate` (why: worker/training/allreduce_mode.h)
            mode = ("off", "overlap")[step // 4 % 2] if args.allreduce == "rotate" else args.allreduce
            with model.no_sync() if mode == "off" else contextlib.nullcontext():
                stats.loss = nn.functional.cross_entropy(model(X.view(-1, 784)), y)
                optimizer.zero_grad()
                stats.loss.backward()
            optimizer.step()
            stats.synced_steps += mode != "off"
            stats.step_times.append(time.perf_counter() - step_start)
            stats.mode_times.setdefault(mode, []).append(stats.step_times[-1])
            stats.samples += X.shape[0]
            stats.batches_run += 1
            step += 1
            batches += 1
            if first and rank == 0:
                print("step %d" % step, flush=True)
            first = False
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint.save(epoch, batches, step)
            step_start = time.perf_counter()  # the next batch's fetch counts
    stats.seconds = time.perf_counter() - start
    stats.cpu_seconds = cpu_seconds() - cpu_start
    return stats


def report(args, model, stats, rank, world_size, count):
    """Every rank: the job's totals and the t10k accuracy; rank 0 prints
    the figures and writes --metrics_json."""
    cpu = torch.tensor([stats.cpu_seconds], dtype=torch.float64)
    total = torch.tensor([stats.samples], dtype=torch.int64)
    dist.all_reduce(total)
    dist.all_reduce(cpu)
    test = load(args.data_dir, "t10k", args.data_cache)
    with torch.no_grad():
        predicted = model.module(test.tensors[0].view(-1, 784)).argmax(1)
        accuracy = (predicted == test.tensors[1]).float().mean().item()
    if rank != 0:
        return
    figures = {"world_size": world_size, "epochs": args.epochs, "samples": int(total.item()),
               "steps": stats.batches_run, "allreduce": args.allreduce,
               "step_seconds_median": statistics.median(stats.step_times) if stats.step_times else 0,
               "by_mode": {m: {"steps": len(t), "step_seconds_median": statistics.median(t)}
                           for m, t in stats.mode_times.items()},
               "hidden": args.hidden,
               "train_seconds": stats.seconds, "samples_per_s": total.item() / stats.seconds,
               "cpu_seconds": cpu.item(),
               "comm_hook": args.comm_hook, "bytes_sent": count.bytes,
               "bytes_sent_per_step": count.bytes / stats.synced_steps if stats.synced_steps else 0,
               "test_accuracy": accuracy, "final_loss": stats.loss.item()}
    print(json.dumps(figures))
    if args.metrics_json:
        with open(args.metrics_json, "w") as f:
            json.dump(figures, f)


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = build_model(args.hidden, args.bucket_cap_mb)
    count = ByteCount()
    register_comm_hook(args, model, count)
    dataset = load(args.data_dir, "train", args.data_cache)
    if args.limit:
        dataset = torch.utils.data.Subset(dataset, range(min(args.limit, len(dataset))))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    stats = train(args, model, optimizer, dataset, sampler, rank,
                  Checkpoint(args.checkpoint_dir, rank, model, optimizer))
    report(args, model, stats, rank, world_size, count)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
