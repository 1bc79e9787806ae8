"""Ray Train's TorchTrainer with TieredDataset: each training worker reads its own slice.

    python examples/ray_train.py --demo                    # its own local Ray, local S3 server, 2 CPU workers
    python examples/ray_train.py --url s3://bucket/train --num-workers 8 --use-gpu

Ray Train starts one process per worker and sets up torch.distributed (gloo on CPU, NCCL on
GPU); TieredDataset takes the rank and world size from it, and reuses the worker's Ray
connection to find its node's cache. Nothing else changes from a plain training loop. The
workers report the ids of the rows they trained on, so ``--demo`` can check that every row was
seen exactly once per epoch across workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch


def train_loop_per_worker(config: dict) -> None:
    """Runs in every Ray Train worker (a torch.distributed rank)."""
    import ray.train
    import ray.train.torch
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, collate

    dataset = TieredDataset(config["url"], config.get("tierload_config"), batch_size=config["batch_size"],
                            storage_options=config.get("storage_options"), seed=3,
                            device=None if not config.get("use_gpu") else "cuda")
    loader = DataLoader(dataset, batch_size=config["batch_size"], num_workers=config.get("loader_workers", 0),
                        collate_fn=collate)
    dim = int(dataset.manifest.extra["arrays"][0]["row_shape"][0])
    model = ray.train.torch.prepare_model(torch.nn.Linear(dim - 1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    device = ray.train.torch.get_device()
    for epoch in range(config["epochs"]):
        dataset.set_epoch(epoch)
        ids, batches, loss = [], 0, torch.zeros(())
        for rows, _labels in loader:
            rows = rows.to(device)
            loss = torch.nn.functional.mse_loss(model(rows[:, 1:]), rows[:, 1:].sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ids.extend(int(v) for v in rows[:, 0].cpu())
            batches += 1
        rank = ray.train.get_context().get_world_rank()
        if config.get("record_dir"):  # every rank's ids (Ray Train keeps only rank 0's reports)
            with open(os.path.join(config["record_dir"], f"rank{rank}-epoch{epoch}.json"), "w") as handle:
                json.dump({"ids": ids, "batches": batches, "len_loader": len(loader)}, handle)
        ray.train.report({"epoch": epoch, "loss": float(loss), "batches": batches, "rank": rank})


def fit(url: str, *, storage_options: dict | None = None, tierload_config: dict | str | None = None,
        num_workers: int = 2, epochs: int = 2, batch_size: int = 4, use_gpu: bool = False,
        storage_path: str | None = None, record_dir: str | None = None):
    """Run the TorchTrainer and return its ``Result``."""
    import ray.cloudpickle
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if __name__ != "__main__":  # imported from elsewhere: ship this module's code to the workers
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"url": url, "storage_options": storage_options, "tierload_config": tierload_config,
                           "epochs": epochs, "batch_size": batch_size, "use_gpu": use_gpu,
                           "record_dir": record_dir},
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name="tierload-ray-train", storage_path=storage_path),
    )
    return trainer.fit()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--demo", action="store_true", help="local Ray and S3 server with synthetic rows")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--use-gpu", action="store_true")
    args = parser.parse_args(argv)
    if not args.demo:
        if not args.url:
            raise SystemExit("give --url (or --demo)")
        print(fit(args.url, num_workers=args.num_workers, epochs=args.epochs, use_gpu=args.use_gpu).metrics)
        return
    # The demo runs its own local Ray (its S3 server is on this machine's loopback), even where a
    # Ray head already runs or RAY_ADDRESS names one: resources such as num_cpus can only be given
    # to a Ray that ray.init starts. Loopback only: Ray keeps 127.0.0.1 with cluster mode off.
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from demo_data import write_npy_dataset

    from tierload_tools.s3local import LocalS3

    with LocalS3() as s3:
        write_npy_dataset(s3.create_bucket("demo"), "demo/rows", 101)
        ray.init(address="local", num_cpus=args.num_workers + 1, include_dashboard=False,
                 _node_ip_address="127.0.0.1")
        result = fit("s3://demo/rows", storage_options=s3.storage_options, num_workers=args.num_workers,
                     epochs=args.epochs)
        print(result.metrics)
        ray.shutdown()


if __name__ == "__main__":
    main()
