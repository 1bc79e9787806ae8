"""Elastic DDP training: checkpoint rank 0's loader state, resume on another number of ranks.

    torchrun --nproc_per_node 2 examples/train_ddp_elastic.py --url s3://bucket/train --stop-after 3 --save ckpt.pt
    torchrun --nproc_per_node 3 examples/train_ddp_elastic.py --url s3://bucket/train --resume ckpt.pt

Ranks step in lockstep under DistributedDataParallel, so rank 0's state says where the whole
job is: rank 0 saves ``loader.state_dict()`` (torchdata's ``StatefulDataLoader``) with the model;
on restart, at any world size and ``--num-workers``, every rank loads that one state into its
dataset (``dataset.load_state_dict``) before building its loader, and the job continues the
epoch with every remaining sample exactly once (see the README, "Resuming").

``--record PATH`` writes, per rank, the first value of every sample it trained on (the test
suite uses it to check every sample id).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

from tierload import TieredDataset, collate


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="dataset prefix of .npy rows, e.g. s3://bucket/train")
    parser.add_argument("--config", default=None, help="tierload YAML config")
    parser.add_argument("--storage-options", default=None, help="JSON s3fs options (endpoint, credentials)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many batches")
    parser.add_argument("--save", default=None, help="checkpoint rank 0 writes when stopping")
    parser.add_argument("--resume", default=None, help="checkpoint to resume from (any world size)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="collective timeout: a hang fails")
    parser.add_argument("--record", default=None, help="write per-rank sample ids to PATH.<rank>.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    storage = json.loads(args.storage_options) if args.storage_options else None
    dataset = TieredDataset(args.url, args.config, batch_size=args.batch_size, storage_options=storage, seed=1)
    dim = int(dataset.manifest.extra["arrays"][0]["row_shape"][0])  # .npy rows of `dim` float32 values
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(dim - 1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=False)
        model.module.load_state_dict(checkpoint["model"])
        dataset.load_state_dict(checkpoint["loader"])  # rank 0's state, on every rank of the new world size
    loader = StatefulDataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers,
                                collate_fn=collate)
    seen, batches = [], 0
    for rows, _labels in loader:
        loss = torch.nn.functional.mse_loss(model(rows[:, 1:]), rows[:, 1:].sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces here: every rank must take the same number of steps
        optimizer.step()
        seen.extend(int(v) for v in rows[:, 0])
        batches += 1
        if args.stop_after is not None and batches == args.stop_after:
            if rank == 0 and args.save:
                torch.save({"model": model.module.state_dict(), "loader": loader.state_dict()}, args.save)
            break
    if rank == 0:
        print(f"world size {world}: {batches} batches per rank, {len(seen)} samples on rank 0", flush=True)
    if args.record:
        with open(f"{args.record}.{rank}.json", "w", encoding="utf-8") as handle:
            json.dump({"rank": rank, "world_size": world, "batches": batches, "ids": seen}, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
