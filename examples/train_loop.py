"""A plain training loop with TieredDataset, checkpointed mid-epoch and resumed in a new process.

    python examples/train_loop.py --demo                          # local S3 server + synthetic rows
    python examples/train_loop.py --url s3://bucket/train --stop-after 50 --save ckpt.pt
    python examples/train_loop.py --url s3://bucket/train --resume ckpt.pt --num-workers 4

The loader is torchdata's ``StatefulDataLoader`` when installed (``loader.state_dict()`` after
every batch knows exactly which batches the loop consumed), else a plain ``DataLoader`` whose
position is given as ``dataset.state_dict(batches_consumed=k)``. A checkpoint holds the model,
the optimizer and the data position (epoch and seed included). ``--resume`` loads the data
position into a fresh TieredDataset, so the new loader may use a different ``num_workers``;
the rest of the epoch yields exactly the samples not yet seen, in the same order, and the node
cache comes back warm from what the hot tier's directory still holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from torch.utils.data import DataLoader

from tierload import TieredDataset, collate
from tierload.loader.state import from_loader_state, is_loader_state

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError:  # torchdata is optional
    StatefulDataLoader = None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="dataset prefix of .npy rows, e.g. s3://bucket/train")
    parser.add_argument("--demo", action="store_true", help="start a local S3 server with synthetic rows")
    parser.add_argument("--config", default=None, help="tierload YAML config")
    parser.add_argument("--storage-options", default=None, help="JSON s3fs options (endpoint, credentials)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many batches")
    parser.add_argument("--save", default=None, help="checkpoint path written when stopping")
    parser.add_argument("--resume", default=None, help="checkpoint to resume from")
    parser.add_argument("--record", default=None, help="write the ids seen and the cache stats (JSON)")
    return parser.parse_args(argv)


def make_loader(dataset, args):
    kwargs = {"batch_size": args.batch_size, "num_workers": args.num_workers, "collate_fn": collate}
    return (StatefulDataLoader or DataLoader)(dataset, **kwargs)


def run(args) -> dict:
    storage = json.loads(args.storage_options) if args.storage_options else None
    dataset = TieredDataset(args.url, args.config, batch_size=args.batch_size, storage_options=storage, seed=7)
    dim = int(dataset.manifest.extra["arrays"][0]["row_shape"][0])
    model = torch.nn.Linear(dim - 1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    first_epoch, record = 0, {"ids": {}, "stats": {}}
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=False)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        dataset.load_state_dict(checkpoint["data"])  # sets the epoch and seed; any num_workers from here
        first_epoch = dataset.epoch
        print(f"resumed epoch {first_epoch} at sample {checkpoint['data_position']}", flush=True)
    loader = make_loader(dataset, args)
    steps = 0
    for epoch in range(first_epoch, args.epochs):
        if epoch != first_epoch or not args.resume:
            dataset.set_epoch(epoch)
        seen = record["ids"].setdefault(str(epoch), [])
        for rows, _labels in loader:
            loss = torch.nn.functional.mse_loss(model(rows[:, 1:]), rows[:, 1:].sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.extend(int(v) for v in rows[:, 0])
            steps += 1
            if args.stop_after is not None and steps == args.stop_after:
                data = (loader.state_dict() if StatefulDataLoader is not None
                        else dataset.state_dict(batches_consumed=len(seen) // args.batch_size))
                position = (from_loader_state(data, args.batch_size) if is_loader_state(data) else data)["position"]
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "data": data,
                            "data_position": position}, args.save)
                print(f"stopped after {steps} batches (epoch {epoch}); checkpoint {args.save}", flush=True)
                return _finish(record, dataset, args)
        record["stats"][str(epoch)] = dataset.epoch_stats(epoch)
        print(f"epoch {epoch}: {len(seen)} samples, loss {float(loss):.4f}", flush=True)
    return _finish(record, dataset, args)


def _finish(record, dataset, args) -> dict:
    if args.record:
        with open(args.record, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    return record


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.demo:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from demo_data import write_npy_dataset

        from tierload_tools.s3local import LocalS3

        with LocalS3() as s3:
            write_npy_dataset(s3.create_bucket("demo"), "demo/rows", 200)
            args.url, args.storage_options = "s3://demo/rows", json.dumps(s3.storage_options)
            run(args)
        return
    if not args.url:
        raise SystemExit("give --url (or --demo)")
    run(args)


if __name__ == "__main__":
    main()
