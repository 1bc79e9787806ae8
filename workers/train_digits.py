"""A training job that reads through tierload, for ``ray job submit`` on a cluster running ``tierload serve``.

    ray job submit --address http://HEAD:8265 --working-dir . -- \\
        python workers/train_digits.py --url s3://my-bucket/digits/train --config configs/default.yaml

It trains the demo's small CNN; with ``--workers-per-node`` it runs one rank per node as Ray
tasks pinned to each node (rank = node index), each with its own DataLoader over
``TieredDataset``, and averages nothing (each rank reports its own loss): it shows the data
path, not distributed optimisation.
"""

from __future__ import annotations

import argparse
import json
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
def train_rank(url: str, config_path: str | None, rank: int, world_size: int, epochs: int, num_workers: int) -> dict:
    import torch
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, load_config
    from tierload_tools.demo.model import DigitsCNN, to_input

    dataset = TieredDataset(url, load_config(config_path), rank=rank, world_size=world_size, batch_size=32,
                            transform=to_input, address="auto")
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    report = []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        started, seen, total_loss = time.perf_counter(), 0, 0.0
        for images, labels in DataLoader(dataset, batch_size=32, num_workers=num_workers):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels)
            total_loss += float(loss) * len(labels)
        report.append({"epoch": epoch, "samples_per_s": seen / (time.perf_counter() - started),
                       "loss": total_loss / max(seen, 1), **dataset.epoch_stats(epoch)})
    return {"rank": rank, "epochs": report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    ray.init(address="auto")
    nodes = sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))
    tasks = [train_rank.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
        args.url, args.config, rank, len(nodes), args.epochs, args.num_workers) for rank, node in enumerate(nodes)]
    for result in ray.get(tasks):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
