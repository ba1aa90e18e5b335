#!/usr/bin/env bash
# The main job: set up, build, compile the flagship FlashAttention-2 kernel
# and say what was done.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh all
echo "== verifying kernels/flash_fwd.mlir =="
build/bin/tile-opt kernels/flash_fwd.mlir -o /dev/null
echo "kernels/flash_fwd.mlir parses and verifies"
