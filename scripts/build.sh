#!/usr/bin/env bash
# Configures (once) and builds tilec into build/ (or $TILEC_BUILD_DIR).
# Usage: scripts/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TILEC_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DCMAKE_C_COMPILER=/usr/lib/llvm-22/bin/clang \
    -DCMAKE_CXX_COMPILER=/usr/lib/llvm-22/bin/clang++ \
    -DLLVM_USE_LINKER=lld \
    -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null
fi
ninja -C "$BUILD_DIR" "$@"
