#!/usr/bin/env bash
# The main job: set up, build, compile the flagship FlashAttention-2 kernel
# (kernels/flash_fwd.mlir) to PTX + cubin + launch manifest and say what the
# compiler did; where a GPU exists, also compile every variant of the DSL
# flagship and run the correctness check and benchmark on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh all >/dev/null
OUT=build/flagship
echo "== tilec kernels/flash_fwd.mlir --arch=sm_80 -> $OUT =="
build/bin/tilec kernels/flash_fwd.mlir --arch=sm_80 --emit=all -o "$OUT" --stats 2>&1 |
  grep -E '^tilec:|error|warning' || true
ls -l "$OUT"
echo "== what the tile passes did (non-matmul ops per K/V iteration) =="
echo "as written:"
build/bin/tile-opt kernels/flash_fwd.mlir --tile-count-work -o /dev/null 2>&1 | grep remark || true
echo "after tile-optimize (exp2 with folded scale, deferred normalization, masks split off):"
build/bin/tile-opt kernels/flash_fwd.mlir \
  --pass-pipeline='builtin.module(tile-optimize,tile-count-work)' -o /dev/null 2>&1 | grep remark || true
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== GPU found: compiling every flash_fwd variant and running bench/gpu.sh =="
  TILEC_BUILD_DIR=build python3 scripts/build_artifacts.py --out build/artifacts
  bash bench/gpu.sh
else
  echo "== no GPU on this machine: compiled only. To run, copy the repository with"
  echo "   build/artifacts (scripts/build_artifacts.py) to a GPU host and run bench/gpu.sh."
fi
