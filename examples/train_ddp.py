"""Data-parallel training under torchrun with TieredDataset.

    torchrun --nproc_per_node 2 examples/train_ddp.py --url s3://bucket/train --endpoint-url http://...

Every rank builds its own TieredDataset; the rank and world size come from torch.distributed,
so each rank reads its own slice of every epoch and all ranks yield the same number of batches
(``drop_last=False`` pads by repeating samples, ``True`` drops the remainder), which keeps
DistributedDataParallel's gradient all-reduce in step. All ranks on one node share that
node's cache: the first rank to start it owns it; the others join it over Ray (set
``RAY_ADDRESS`` to a running Ray, e.g. one started with ``ray start --head``, to share it
across processes that come and go).

``--record PATH`` writes, per rank, the first value of every sample it trained on and its
batch counts (the test suite uses it to check that each sample appears exactly once).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from tierload import TieredDataset, collate


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="dataset prefix of .npy rows, e.g. s3://bucket/train")
    parser.add_argument("--config", default=None, help="tierload YAML config")
    parser.add_argument("--storage-options", default=None, help="JSON s3fs options (endpoint, credentials)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--drop-last", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="collective timeout: a hang fails")
    parser.add_argument("--record", default=None, help="write per-rank sample ids to PATH.<rank>.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    storage = json.loads(args.storage_options) if args.storage_options else None
    dataset = TieredDataset(args.url, args.config, batch_size=args.batch_size, drop_last=args.drop_last,
                            storage_options=storage, seed=1)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=collate)
    dim = int(dataset.manifest.extra["arrays"][0]["row_shape"][0])  # .npy rows of `dim` float32 values
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(dim - 1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    record = {"rank": rank, "world_size": world, "len_loader": len(loader), "epochs": []}
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        seen, batches = [], 0
        for rows, _labels in loader:
            loss = torch.nn.functional.mse_loss(model(rows[:, 1:]), rows[:, 1:].sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here: a rank with fewer batches would hang
            optimizer.step()
            seen.extend(int(v) for v in rows[:, 0])
            batches += 1
        counts = torch.tensor([batches])
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        record["epochs"].append({"epoch": epoch, "batches": batches, "max_batches": int(counts), "ids": seen,
                                 "loss": float(loss)})
        if rank == 0:
            print(f"epoch {epoch}: {batches} batches per rank, loss {float(loss):.4f}", flush=True)
    if args.record:
        with open(f"{args.record}.{rank}.json", "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
