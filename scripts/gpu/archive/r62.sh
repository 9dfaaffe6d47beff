#!/bin/bash
# Prepared in session 31 (its device time ran out before it could run), for a fresh machine (before it: `mkdir -p /tmp/x && cp .gpu/w1/wheel.a
# /tmp/x/`, carry .gpu/w1; this call carries .gpu/w2 .gpu/bin .gpu/ptx). Why the expert kernels
# run at ~2 TB/s at the verify when neither their conversions (r58: 5-13% of their time) nor
# their bytes (the grouped layout read a third fewer and was slower) bound them: Nsight
# Compute's full set of sections (occupancy, warp stall reasons, memory workload) over the first
# up and down kernel of one B8 verify. COHORT_MOE_GROUPED=0: the r56-r61 binary's grouped
# layout is not in this commit's kernels/.
set -u
. scripts/gpu/wheel.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU ($($NCU --version | tail -1))"
COHORT_MOE_GROUPED=0 timeout 150 $NCU --profile-from-start off --clock-control none --set full \
  --kernel-name regex:moe_experts --launch-count 2 --print-units base --log-file $OUT/ncu62.txt \
  $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 64 --iters 2 --compiled all \
  --steps b8 --profile-step verify 2>&1 | grep -E "rror|PROF" | head -6
grep -E "moe_experts|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Issue Slots Busy|L1/TEX Hit|L2 Hit|Eligible Warps|No Eligible|Active Warps" $OUT/ncu62.txt | head -80
