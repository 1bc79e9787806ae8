"""Entrypoint on a Ray cluster: start tierload's actors on every node.

    ray job submit --address http://HEAD:8265 --working-dir . -- python workers/serve.py --config configs/default.yaml

is the same as running ``tierload serve --address auto --config ...`` on the head node.
Idempotent: a second run starts nothing.
"""

from __future__ import annotations

import argparse
import json

from tierload.config.loading import load_config
from tierload.deploy.service import serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="auto", help="Ray address (default: auto)")
    parser.add_argument("--config", default=None, help="tierload YAML config")
    args = parser.parse_args()
    config = load_config(args.config, overrides={"ray": {"address": args.address}})
    print(json.dumps(serve(config)))


if __name__ == "__main__":
    main()
