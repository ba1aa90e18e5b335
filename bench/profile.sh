#!/usr/bin/env bash
# Nsight Compute on a GPU host: tilec's kernel and torch's FA2 side by side
# on the benchmark's shapes (second launch of each, after a warm-up), with
# the sections that say where the time goes: throughput, occupancy, warp
# stalls, instruction mix. Run after bench/gpu.sh built the runtime.
#
#   bash bench/profile.sh [kernel] [seqlen]     (default flash_fwd_f16_d128 2048)
set -euo pipefail
cd "$(dirname "$0")/.."
KERNEL=${1:-flash_fwd_f16_d128}
SEQLEN=${2:-2048}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "ncu not found: skipped"; exit 0; }
export PYTHONPATH="$PWD/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}"
# Launch 1 of each kernel is the warm-up; profile launch 2 ("flash_fwd"
# matches tilec's names and FA2's flash_fwd_kernel).
"$NCU" --clock-control none --kernel-name regex:flash_fwd --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
  python3 bench/profile_one.py --kernel "$KERNEL" --seqlen "$SEQLEN"
