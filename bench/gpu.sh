#!/usr/bin/env bash
# Check and benchmark tilec's compiled flash-attention kernels on a GPU host.
#
# Needs no LLVM: builds only the runtime (lib/runtime) and runs the kernels
# the compiler already wrote to build/artifacts. With the relocatable tilec
# CLI (scripts/bundle.sh; carry build/bundle) it also compiles here: the
# bundle is unpacked to build/tilec-bundle and put on TILEC_CLI, so the
# package compiles any head dim or variant in a child process (prebuilt
# artifacts stay the fallback without it), and a missing build/artifacts is
# built here by scripts/build_artifacts.py. Steps: build, runtime tests,
# correctness (bench/check_flash.py), compile-on-this-host check
# (bench/check_compile.py, head dims 80 and 112, when a compiler is here),
# compute-sanitizer on a few small cases, benchmark (bench/bench_flash.py),
# then a summary table.
#
#   bash bench/gpu.sh
#
# Environment:
#   TILEC_ARTIFACTS   folder of manifests (default build/artifacts)
#   TILEC_BUNDLE      the CLI bundle (default build/bundle/tilec-bundle.tar.xz);
#                     TILEC_CLI, if set, is used instead
#   TILEC_COMPILE_DIMS head dims bench/check_compile.py compiles here
#                     (default 80,112; "" to skip)
#   TILEC_BENCH_ARGS  extra bench_flash.py arguments (default --quick: seqlens
#                     2k and 16k; set to "" for all six seqlens, add --record
#                     to append to bench/RESULTS.md)
#   TILEC_SANITIZE    compute-sanitizer tools, comma-separated (default
#                     memcheck; e.g. memcheck,racecheck; "" to skip)
#   TILEC_BENCH_VARIANTS  if 1, also time flash_attn's variants against their
#                     peers (bench/bench_variants.py: GQA, window, softcap, ALiBi, varlen)
#   TILEC_GPU_DECODE  if 1, also the decode and C++ fast-path checks: the GPU
#                     tests of flash_attn_with_kvcache and of _tilec_fast
#                     (C++ = Python = general path bit for bit, rotary, ALiBi,
#                     batch index, left padding), its host time per call
#                     (bench/decode_overhead.py) and the decode table
#                     (bench/bench_decode.py --pages 16,256 --no-sweep)
#   OUT               if set, logs, summaries and RESULTS.md are copied there
set -euo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

ARTIFACTS=${TILEC_ARTIFACTS:-build/artifacts}
BUNDLE=${TILEC_BUNDLE:-build/bundle/tilec-bundle.tar.xz}
COMPILE_DIMS=${TILEC_COMPILE_DIMS-80,112}
BENCH_ARGS=${TILEC_BENCH_ARGS---quick}
SANITIZE=${TILEC_SANITIZE-memcheck}
BUILD=build-gpu
LOGS=$BUILD/logs
START=$SECONDS

step() { printf '\n=== [%4ds] %s\n' $((SECONDS - START)) "$*"; }
run() { printf '+ %s\n' "$*"; "$@"; }

# The compiler, when the bundle came along: unpacked where the package looks
# (<repo>/build/tilec-bundle) and named in TILEC_CLI for every step.
if [ -z "${TILEC_CLI:-}" ] && [ -f "$BUNDLE" ]; then
  step "unpack the tilec CLI bundle ($BUNDLE)"
  rm -rf build/tilec-bundle
  python3 - "$BUNDLE" build <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    try:
        tar.extractall(sys.argv[2], filter="data")
    except TypeError:  # Python < 3.12
        tar.extractall(sys.argv[2])
EOF
  export TILEC_CLI=$PWD/build/tilec-bundle/bin/tilec
fi
if [ -n "${TILEC_CLI:-}" ]; then
  if "$TILEC_CLI" --version; then
    cat build/tilec-bundle/README 2>/dev/null || true
  else
    echo "warning: $TILEC_CLI does not run here: only prebuilt artifacts will launch" >&2
    unset TILEC_CLI
  fi
fi
if [ ! -d "$ARTIFACTS" ] && [ -n "${TILEC_CLI:-}" ]; then
  step "no $ARTIFACTS: compiling them here with $TILEC_CLI"
  run python3 scripts/build_artifacts.py --out "$ARTIFACTS"
fi

if [ ! -d "$ARTIFACTS" ]; then
  echo "error: $ARTIFACTS does not exist: compile the kernels first (the compiler writes manifests there)" >&2
  exit 2
fi
if ! compgen -G "$ARTIFACTS/flash_fwd*.json" >/dev/null; then
  echo "error: no flash_fwd*.json manifests in $ARTIFACTS" >&2
  exit 2
fi

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "(nvidia-smi failed)"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda)'
ls "$ARTIFACTS"

step "build lib/runtime"
run cmake -S lib/runtime -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v python3)"
run cmake --build "$BUILD" --target _tilec_runtime
# _tilec_fast (the decode call's host path in C++) compiles against this
# host's torch; where it does not, the Python fast path runs instead.
run cmake --build "$BUILD" || echo "warning: the build beyond _tilec_runtime failed (_tilec_fast?): decode calls take the Python fast path"
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$LOGS"
mkdir -p "$LOGS"

# Failures are collected so that every step runs; the exit status reports them.
failed=()

step "runtime tests"
run python3 -m pytest -q -rs test/runtime 2>&1 | tee "$LOGS/pytest.log" || failed+=("runtime tests")

step "torch integration (custom op, torch.compile, CUDA graphs, streams)"
PYTHONPATH="$PWD/python:$PYTHONPATH" run python3 -m pytest -q -rs test/python/test_torch_ops.py 2>&1 \
  | tee "$LOGS/pytest_torch.log" \
  || failed+=("torch integration tests")

step "host overhead per call (bench/host_overhead.py)"
run python3 bench/host_overhead.py 2>&1 | tee "$LOGS/host_overhead.md" || failed+=("host overhead")

step "correctness"
run python3 bench/check_flash.py --artifacts "$ARTIFACTS" --summary "$LOGS/check_summary.txt" \
  2>&1 | tee "$LOGS/check.log" || failed+=("correctness")

if [ -n "$COMPILE_DIMS" ] && [ -n "${TILEC_CLI:-}" ]; then
  step "compile on this host: head dims $COMPILE_DIMS (not prebuilt), $TILEC_CLI"
  run python3 bench/check_compile.py --head-dims "$COMPILE_DIMS" \
    2>&1 | tee "$LOGS/check_compile.log" || failed+=("compile on this host")
elif [ -n "$COMPILE_DIMS" ]; then
  step "compile on this host: skipped (no tilec CLI: carry build/bundle from scripts/bundle.sh)"
fi

if [ -n "$SANITIZE" ] && ! command -v compute-sanitizer >/dev/null &&
   [ ! -x /usr/local/cuda/bin/compute-sanitizer ]; then
  step "compute-sanitizer: not installed, skipped"
  SANITIZE=
fi
# Head dims outside the benchmark (32, 96, 160, 256: scripts/build_artifacts.py
# writes them to <artifacts>/extra): correctness only.
if compgen -G "$ARTIFACTS/extra/flash_fwd*.json" >/dev/null; then
  step "correctness, other head dims ($ARTIFACTS/extra)"
  run python3 bench/check_flash.py --artifacts "$ARTIFACTS/extra" \
    --summary "$LOGS/check_extra_summary.txt" 2>&1 | tee "$LOGS/check_extra.log" || failed+=("correctness (extra)")
fi

# The backward (kernels/flash_bwd.py through tilec.flash_bwd, which finds the
# prebuilt flash_bwd_* kernels by IR digest): gradients vs float64 autograd.
export TILEC_ARTIFACTS="${TILEC_ARTIFACTS:-$ARTIFACTS:$ARTIFACTS/extra:$ARTIFACTS/variants}"
if compgen -G "$ARTIFACTS/flash_bwd*.json" >/dev/null; then
  step "backward correctness"
  run python3 bench/check_bwd.py --summary "$LOGS/check_bwd_summary.txt" \
    2>&1 | tee "$LOGS/check_bwd.log" || failed+=("backward correctness")
fi

# flash_attn's variants (GQA, causal with seqlen_q != seqlen_k, windows,
# softcap, ALiBi, varlen, head dims 59..256) through the flash_attn API, with
# the kernels scripts/build_artifacts.py wrote to <artifacts>/variants.
HAVE_VARIANTS=
if compgen -G "$ARTIFACTS/variants/flash_fwd*.json" >/dev/null; then
  HAVE_VARIANTS=1
  step "correctness, flash_attn variants ($ARTIFACTS/variants)"
  run python3 bench/check_flash.py --artifacts "$ARTIFACTS" --variants \
    --summary "$LOGS/check_variants_summary.txt" 2>&1 | tee "$LOGS/check_variants.log" \
    || failed+=("correctness (variants)")
fi

for tool in ${SANITIZE//,/ }; do
  step "compute-sanitizer $tool (small cases)"
  run python3 bench/check_flash.py --artifacts "$ARTIFACTS" --sanitize "$tool" \
    2>&1 | tee "$LOGS/sanitize_$tool.log" || failed+=("sanitize $tool")
  if [ -n "$HAVE_VARIANTS" ]; then
    run python3 bench/check_flash.py --artifacts "$ARTIFACTS" --variants --sanitize "$tool" \
      2>&1 | tee "$LOGS/sanitize_variants_$tool.log" || failed+=("sanitize $tool (variants)")
  fi
done

step "benchmark"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
run python3 bench/bench_flash.py --artifacts "$ARTIFACTS" --summary "$LOGS/bench_summary.md" \
  --plot "$LOGS/bench.png" \
  $BENCH_ARGS 2>&1 | tee "$LOGS/bench.log" || failed+=("benchmark")

if compgen -G "$ARTIFACTS/flash_bwd*.json" >/dev/null; then
  for tool in ${SANITIZE//,/ }; do
    step "compute-sanitizer $tool, backward (small cases)"
    run "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" --tool "$tool" --error-exitcode 1 python3 bench/check_bwd.py --quick \
      --head-dims 64,128 2>&1 | tail -n 40 | tee "$LOGS/sanitize_bwd_$tool.log" || failed+=("sanitize bwd $tool")
  done
  step "backward benchmark"
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  run python3 bench/bench_bwd.py --summary "$LOGS/bench_bwd_summary.md" $BENCH_ARGS \
    2>&1 | tee "$LOGS/bench_bwd.log" || failed+=("backward benchmark")
fi

if [ "${TILEC_BENCH_VARIANTS:-0}" = 1 ]; then
  step "benchmark, flash_attn variants"
  run python3 bench/bench_variants.py --artifacts "$ARTIFACTS" 2>&1 | tee "$LOGS/bench_variants.log" \
    || failed+=("benchmark (variants)")
fi

if [ "${TILEC_GPU_DECODE:-0}" = 1 ]; then
  step "decode and fast-path GPU tests"
  PYTHONPATH="$PWD/python:$PYTHONPATH" run python3 -m pytest -q -rs test/python/test_flash_decode_gpu.py \
    test/python/test_flash_decode_fused.py test/python/test_flash_attn_native.py 2>&1 | tail -n 30 \
    | tee "$LOGS/pytest_decode.log" || failed+=("decode GPU tests")
  step "decode host time per call (bench/decode_overhead.py)"
  PYTHONPATH="$PWD/python:$PYTHONPATH" run python3 bench/decode_overhead.py 2>&1 \
    | tee "$LOGS/decode_overhead.md" || failed+=("decode overhead")
  step "decode table (bench/bench_decode.py)"
  PYTHONPATH="$PWD/python:$PYTHONPATH" run python3 bench/bench_decode.py --pages 16,256 --no-sweep 2>&1 \
    | tee "$LOGS/bench_decode.log" || failed+=("decode benchmark")
fi

if [ -n "${OUT:-}" ]; then
  cp -r "$LOGS" "$OUT/"
  [ -f bench/RESULTS.md ] && cp bench/RESULTS.md "$OUT/"
fi

step "summary"
echo "correctness:"
cat "$LOGS/check_summary.txt" 2>/dev/null || echo "  (no summary: see $LOGS/check.log)"
cat "$LOGS/check_extra_summary.txt" 2>/dev/null || true
tail -n 1 "$LOGS/check_compile.log" 2>/dev/null || true
cat "$LOGS/check_variants_summary.txt" 2>/dev/null || true
echo
echo "host overhead (us per call; fast paths in C++: $(python3 -c 'import torch, sys; sys.path[:0] = ["python"]; from tilec import flash_attn; print("yes" if flash_attn._native_module() else "no (_tilec_fast not built for this torch)")' 2>&1 | tail -1)):"
cat "$LOGS/host_overhead.md" 2>/dev/null || true
echo
echo "benchmark (TFLOP/s):"
cat "$LOGS/bench_summary.md" 2>/dev/null || echo "  (no table: see $LOGS/bench.log)"
echo
echo "backward:"
cat "$LOGS/check_bwd_summary.txt" 2>/dev/null || true
cat "$LOGS/bench_bwd_summary.md" 2>/dev/null || true
echo
if [ "${TILEC_GPU_DECODE:-0}" = 1 ]; then
  echo "decode: tests $(tail -n 1 "$LOGS/pytest_decode.log" 2>/dev/null)"
  tail -n 12 "$LOGS/decode_overhead.md" 2>/dev/null || true
  tail -n 14 "$LOGS/bench_decode.log" 2>/dev/null || true
  echo
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all steps passed"
