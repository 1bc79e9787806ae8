"""Next-token training on a tokenized corpus read in place: ``layout="tokens"``, windows of
``seq_len + 1`` tokens (docs/training.md, "Token windows").

    python examples/train_tokens.py --demo                 # local S3 server + a synthetic corpus
    python examples/train_tokens.py --url s3://bucket/tokens --seq-len 2048 --token-dtype uint32

The corpus is whatever token files sit under the prefix, in listing order: raw ``.bin`` files
(little-endian ``--token-dtype``), ``.npy`` files, or Megatron-LM ``.bin`` + ``.idx`` pairs.
``--demo`` writes three raw uint16 ``.bin`` files and one Megatron pair (its ``.idx`` written from
the format's layout) to a local S3 server, so windows run across file boundaries. Each step's
batch is ``(batch, seq_len + 1)`` int64; inputs are ``[:, :-1]``, targets ``[:, 1:]`` (or ask
for ``--pairs``: the dataset yields ``(input, target)`` itself).
"""

from __future__ import annotations

import argparse
import json
import struct

import numpy as np
import torch
from torch.utils.data import DataLoader

from tierload import TieredDataset, collate


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="prefix of token files, e.g. s3://bucket/tokens")
    parser.add_argument("--demo", action="store_true", help="start a local S3 server with a synthetic corpus")
    parser.add_argument("--config", default=None, help="tierload YAML config (tiers; manifest settings below win)")
    parser.add_argument("--storage-options", default=None, help="JSON s3fs options (endpoint, credentials)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per window minus one")
    parser.add_argument("--token-dtype", default="uint16", choices=["uint16", "uint32"], help="dtype of a raw .bin")
    parser.add_argument("--no-cross-files", action="store_true", help="no window runs into the next file")
    parser.add_argument("--pairs", action="store_true", help="yield (input, target) pairs")
    parser.add_argument("--vocab", type=int, default=65536)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--record", default=None, help="write the first token of every window read (JSON)")
    return parser.parse_args(argv)


def run(args) -> dict:
    from tierload.config.loading import load_config

    config = load_config(args.config, overrides={"manifest": {
        "layout": "tokens", "seq_len_tokens": args.seq_len, "token_dtype": args.token_dtype,
        "token_cross_files": not args.no_cross_files, "token_output": "pair" if args.pairs else "window"}})
    storage = json.loads(args.storage_options) if args.storage_options else None
    dataset = TieredDataset(args.url, config, batch_size=args.batch_size, storage_options=storage, seed=1)
    print(f"{dataset.manifest.num_samples} windows of {args.seq_len + 1} tokens in {len(dataset.manifest.blocks)} "
          f"blocks; {dataset.manifest.extra['tail_tokens']} tail tokens dropped", flush=True)
    model = torch.nn.Sequential(torch.nn.Embedding(args.vocab, 32), torch.nn.Linear(32, args.vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=collate)
    record: dict[str, list[int]] = {}
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        firsts = record.setdefault(str(epoch), [])
        for batch, _labels in loader:
            inputs, targets = batch if args.pairs else (batch[:, :-1], batch[:, 1:])
            logits = model(inputs % args.vocab)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), (targets % args.vocab).flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            firsts.extend(int(token) for token in inputs[:, 0])
        print(f"epoch {epoch}: {len(firsts)} windows, loss {loss.item():.3f}, "
              f"cold bytes {dataset.epoch_stats(epoch)['cold_bytes']:.0f}", flush=True)
    if args.record:
        with open(args.record, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    return record


def demo_corpus(fs, prefix: str, tokens_per_file: int = 3000) -> None:
    """Tokens 0, 1, 2, ... (mod 65536) over three raw uint16 .bin files and a Megatron-LM pair."""
    stream = np.arange(4 * tokens_per_file, dtype=np.int64) % 65536
    parts = np.split(stream, 4)
    files = {f"{prefix}/part-{i}.bin": part.astype("<u2").tobytes() for i, part in enumerate(parts[:3])}
    documents = np.array_split(parts[3], 5)  # the last file as 5 documents of a Megatron-LM dataset
    sizes = np.array([len(doc) for doc in documents], dtype="<i4")
    pointers = np.concatenate(([0], np.cumsum(sizes[:-1]))).astype("<i8") * 2
    files[f"{prefix}/part-3.bin"] = parts[3].astype("<u2").tobytes()
    files[f"{prefix}/part-3.idx"] = (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1)
                                     + sizes.tobytes() + pointers.tobytes()
                                     + np.arange(len(sizes) + 1, dtype="<i8").tobytes())
    fs.pipe(files)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.demo:
        from tierload_tools.s3local import LocalS3

        with LocalS3() as s3:
            demo_corpus(s3.create_bucket("demo"), "demo/tokens")
            args.url, args.storage_options = "s3://demo/tokens", json.dumps(s3.storage_options)
            run(args)
        return
    if not args.url:
        raise SystemExit("give --url (or --demo)")
    run(args)


if __name__ == "__main__":
    main()
