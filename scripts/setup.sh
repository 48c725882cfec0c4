#!/usr/bin/env bash
# Create .venv and install unitta with its dependencies (CPU machine; torch's wheel runs on CPU too).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
# torch/torchvision pinned to the releases these machines serve from local disk (spec/environment.md)
.venv/bin/pip install -q "torch==2.14.1" "torchvision==0.29.1" || .venv/bin/pip install -q torch torchvision
.venv/bin/pip install -q -e ".[dev]"
