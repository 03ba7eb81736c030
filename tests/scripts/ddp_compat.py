"""A plain torch.distributed training script, written the way users write
them for torchrun: env:// initialisation with Gloo, DistributedDataParallel,
DistributedSampler, and @record for error files. cpptorchrun must run it
unchanged.

  ddp_compat.py --out DIR [--steps N] [--fail_rank R]

Each rank writes DIR/rank<R>.json: its RANK/LOCAL_RANK/WORLD_SIZE as torch
sees them, the first and last loss, and a checksum of its parameters (equal
on every rank after DDP). --fail_rank raises a RuntimeError on that rank.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--fail_rank", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == args.fail_rank:
        raise RuntimeError("rank %d failed on purpose" % rank)

    # A separable two-class problem that a small MLP learns in a few steps.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 16, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=1)
    loader = DataLoader(data, batch_size=32, sampler=sampler)

    torch.manual_seed(rank)  # different on purpose: DDP broadcasts rank 0's
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step >= args.steps:
                break
        epoch += 1
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    result = {
        "rank": rank, "world_size": world,
        "env_rank": int(os.environ["RANK"]), "env_local_rank": int(os.environ["LOCAL_RANK"]),
        "env_world_size": int(os.environ["WORLD_SIZE"]),
        "first_loss": losses[0], "last_loss": sum(losses[-10:]) / len(losses[-10:]),
        "checksum": checksum,
    }
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
