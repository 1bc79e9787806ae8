#!/usr/bin/env bash
# Creates benchmarks/.venv-peers: the environment in which `tierload bench` runs the peer
# loaders that cannot live next to tierload's pinned torch (MosaicML Streaming, LitData).
#
# Why a second environment: mosaicml-streaming imports torchvision, and no torchvision
# imports beside the CPU torch 2.13.0 wheel tierload pins; torch==2.14.1 with
# torchvision==0.29.1 import together. Both peers pull whatever torch their resolver likes
# unless pip is given a constraint, so every install below runs under one.
#
# Usage: bash benchmarks/setup_peers.sh [PYTHON]   (default: python3.11, else python3)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv-peers"
python="${1:-$(command -v python3.11 || command -v python3)}"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
cat > "$constraints" <<'PINS'
torch==2.14.1
torchvision==0.29.1
PINS
"$python" -m venv "$venv"
pip="$venv/bin/pip"
"$pip" install --quiet --upgrade pip
"$pip" install --quiet -c "$constraints" torch==2.14.1 torchvision==0.29.1
"$pip" install --quiet -c "$constraints" mosaicml-streaming litdata boto3 s3fs psutil numpy pillow
"$venv/bin/python" - <<'CHECK'
import importlib.metadata as md
import streaming, litdata, torch, torchvision  # noqa: F401 - the point is that they import together
print("peers env ok:", {n: md.version(n) for n in ("torch", "torchvision", "mosaicml-streaming", "litdata")})
CHECK
