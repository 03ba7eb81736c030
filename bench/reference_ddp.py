"""The Python reference for the training benchmark: the seed's listing
(chapter 1, "How Data Parallelism Works") as written, with Gloo instead of
NCCL (this machine has no GPU), run under torchrun.

Same model (Linear(784, 512), ReLU, Linear(512, 10)), DDP, DistributedSampler
with set_epoch, a DataLoader of batch 64, Adam 1e-3, cross-entropy; the same
Fashion-MNIST IDX files as `train` (read with gzip + numpy instead of
torchvision, scaled to [0, 1] as ToTensor does). Rank 0 writes the same
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

    /usr/bin/python3 bench/torchrun_ref.py --standalone --nproc_per_node=2 \
        bench/reference_ddp.py --epochs 1 --metrics_json /tmp/ref.json
"""
import argparse
import contextlib
import gzip
import json
import os
import resource
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = magic & 0xFF
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).view(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--metrics_json", default="")
    parser.add_argument("--limit", type=int, default=0, help="train on the first N samples (0: all)")
    parser.add_argument("--checkpoint_dir", default="")
    parser.add_argument("--checkpoint_every", type=int, default=0, help="steps between checkpoints")
    parser.add_argument("--hidden", default="512", help="hidden layer widths, comma-separated")
    parser.add_argument("--bucket_cap_mb", type=float, default=25)
    parser.add_argument("--allreduce", choices=("overlap", "off", "rotate"), default="overlap",
                        help="off: every step under DDP's no_sync() (no all-reduce); rotate: off and "
                             "overlap in blocks of 4 steps (the DDP benchmark's A/B within one run)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    # Each process gets the SAME model
    widths = [784] + [int(w) for w in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    model = DDP(model, bucket_cap_mb=args.bucket_cap_mb)

    dataset = load(args.data_dir, "train")
    if args.limit:
        dataset = torch.utils.data.Subset(dataset, range(min(args.limit, len(dataset))))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    ckpt = os.path.join(args.checkpoint_dir, "checkpoint.pt") if args.checkpoint_dir else ""
    start_epoch, skip_batches, step = 0, 0, 0
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, skip_batches, step = state["epoch"], state["batches"], state["step"]
        if rank == 0:
            print("resumed from checkpoint at step %d" % step, flush=True)

    def save(epoch, batches):
        if rank != 0 or not ckpt:
            return
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch, "batches": batches, "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    samples = 0
    batches_run = 0
    cpu_start = cpu()
    start = time.perf_counter()
    step_times = []  # each batch's: its fetch, forward, backward, all-reduce, step
    mode_times = {}  # the same, per all-reduce mode
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
                loss = nn.functional.cross_entropy(model(X.view(-1, 784)), y)
                optimizer.zero_grad()
                loss.backward()
            optimizer.step()
            step_times.append(time.perf_counter() - step_start)
            mode_times.setdefault(mode, []).append(step_times[-1])
            samples += X.shape[0]
            batches_run += 1
            step += 1
            batches += 1
            if first and rank == 0:
                print("step %d" % step, flush=True)
            first = False
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save(epoch, batches)
            step_start = time.perf_counter()  # the next batch's fetch counts
    seconds = time.perf_counter() - start
    cpu_seconds = torch.tensor([cpu() - cpu_start], dtype=torch.float64)

    total = torch.tensor([samples], dtype=torch.int64)
    dist.all_reduce(total)
    dist.all_reduce(cpu_seconds)
    test = load(args.data_dir, "t10k")
    with torch.no_grad():
        predicted = model.module(test.tensors[0].view(-1, 784)).argmax(1)
        accuracy = (predicted == test.tensors[1]).float().mean().item()
    if rank == 0:
        figures = {"world_size": world_size, "epochs": args.epochs, "samples": int(total.item()),
                   "steps": batches_run, "allreduce": args.allreduce,
                   "step_seconds_median": statistics.median(step_times) if step_times else 0,
                   "by_mode": {m: {"steps": len(t), "step_seconds_median": statistics.median(t)}
                               for m, t in mode_times.items()},
                   "hidden": args.hidden,
                   "train_seconds": seconds, "samples_per_s": total.item() / seconds,
                   "cpu_seconds": cpu_seconds.item(),
                   "test_accuracy": accuracy, "final_loss": loss.item()}
        print(json.dumps(figures))
        if args.metrics_json:
            with open(args.metrics_json, "w") as f:
                json.dump(figures, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
