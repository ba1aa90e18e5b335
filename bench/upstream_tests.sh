#!/usr/bin/env bash
# flash-attention's own test suite (tests/test_flash_attn.py) against tilec
# on a GPU host, through the stand-in `flash_attn` package in
# bench/upstream/ (tilec's functions under upstream's names; this repository
# carries none of upstream's code). A random sample of the collected tests is
# run within a time budget; the summary per test function, with the most
# common failure messages, ends the output.
#
#   bash bench/upstream_tests.sh [path/to/test_flash_attn.py]
#
# Default test file: build/upstream/test_flash_attn.py (copy it there from a
# flash-attention checkout; carry build/upstream to the GPU host). einops is
# taken from build/upstream/einops-*.whl when it is not installed
# (`pip download einops -d build/upstream`). Run after bench/gpu.sh built the
# runtime (build-gpu/python) or with tilec importable otherwise.
# Environment: see bench/upstream/tilec_upstream_plugin.py (sample size,
# seed, budget, report path); TILEC_UPSTREAM_JOBS=N runs N pytest processes
# on shards of the sample in parallel (default 1). The budget stops new tests;
# a running one finishes, and collecting 500k tests takes 30-60 s first, so
# give an outer time limit at least budget + 120 s (each shard also saves its
# outcomes after every test, so `python3 bench/upstream/tilec_upstream_plugin.py
# merge OUT.md REPORT*.json` works on what a killed run left; one process
# saves REPORT.json the same way).
# TILEC_UPSTREAM_CPU=1 runs the suite on torch CPU tensors through the CPU
# runner (no GPU needed): the copy's "cuda" devices become "cpu" and the
# capability probes answer sm_80; with TILEC_UPSTREAM_MAX_SEQLEN=256
# TILEC_UPSTREAM_PER_FN=10 it is a few-minute sample over every test function.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=${1:-build/upstream/test_flash_attn.py}
[ -f "$TESTS" ] || { echo "error: no $TESTS (a copy of flash-attention's tests/test_flash_attn.py)" >&2; exit 2; }
EXTRA=""
if ! python3 -c "import einops" 2>/dev/null; then
  WHEEL=$(ls build/upstream/einops-*.whl 2>/dev/null | head -1 || true)
  [ -n "$WHEEL" ] || { echo "error: einops is not installed and no build/upstream/einops-*.whl" >&2; exit 2; }
  EXTRA=":$PWD/$WHEEL"
fi
export PYTHONPATH="$PWD/bench/upstream:$PWD/python:$PWD/build-gpu/python:$PWD/build/python$EXTRA${PYTHONPATH:+:$PYTHONPATH}"
export TILEC_UPSTREAM_REPORT=${TILEC_UPSTREAM_REPORT:-${OUT:-$PWD/build}/upstream-summary.md}
# The test file is run from a scratch folder so no conftest of this tree applies.
work=$(mktemp -d)
if [ "${TILEC_UPSTREAM_CPU:-0}" = 1 ]; then
  sed -e 's/torch\.cuda\.get_device_capability("cuda")/(8, 0)/' \
      -e 's/torch\.cuda\.get_device_properties("cuda")\.total_memory/(80 * 2**30)/' \
      -e 's/device = "cuda"/device = "cpu"/' -e 's/device="cuda"/device="cpu"/g' \
      -e 's/torch\.cuda\.synchronize()/None/' "$TESTS" > "$work/test_flash_attn.py"
  if grep -n 'cuda' "$work/test_flash_attn.py" | grep -v '^[0-9]*: *#' >&2; then
    echo "warning: the CPU copy still names cuda on the lines above" >&2
  fi
else
  cp "$TESTS" "$work/test_flash_attn.py"
fi
cd "$work"
JOBS=${TILEC_UPSTREAM_JOBS:-1}
if [ "$JOBS" -le 1 ]; then
  python3 -m pytest -q -p tilec_upstream_plugin -p no:cacheprovider --no-header -rN \
    test_flash_attn.py 2>&1 | tail -5 || true
else
  # JOBS processes share the sample (TILEC_UPSTREAM_SHARD i/JOBS): compiling
  # a kernel variant is a child process on a CPU core, which is what a run's
  # time goes to, so shards in parallel reach JOBS times as many tests.
  for i in $(seq 0 $((JOBS - 1))); do
    TILEC_UPSTREAM_SHARD=$i/$JOBS TILEC_UPSTREAM_REPORT=$TILEC_UPSTREAM_REPORT.$i \
      python3 -m pytest -q -p tilec_upstream_plugin -p no:cacheprovider --no-header -rN \
      test_flash_attn.py > shard$i.log 2>&1 &
  done
  wait
  tail -n 3 shard*.log
  python3 "$OLDPWD/bench/upstream/tilec_upstream_plugin.py" merge "$TILEC_UPSTREAM_REPORT" \
    $(for i in $(seq 0 $((JOBS - 1))); do echo "$TILEC_UPSTREAM_REPORT.$i.json"; done)
fi
