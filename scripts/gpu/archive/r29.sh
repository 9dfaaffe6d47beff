#!/bin/bash
# Where the device time of each step goes at the real geometry: one B8 verify, one B8 AR step,
# one B1 step and one B8 draft, each bracketed by bench-step --profile-step for Nsight Compute
# (ncu --profile-from-start off), every kernel timed (gpu__time_duration: ncu serialises
# launches, so the sum is device busy time with no overlap and no launch gaps), then summed by
# kernel (scripts/gpu/ncu_summary.py). ncu's clock and cache control are off so kernels run as
# they do unprofiled. The step's own wall time comes from the same run's table. Runs right
# after r28 on what it left in /tmp (no carry), or after the two wheel calls with .gpu/bin and
# .gpu/ptx. STEPS picks the steps (default: verify ar; a second call with STEPS="b1 draft"
# fits the 600 s a call may take).
set -u
if [ -x /tmp/cohort ] && [ -d /tmp/site/mlx ]; then . scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx; else . scripts/gpu/wheel.sh; fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{
echo "=== ncu: ${NCU:-none}"
[ -n "$NCU" ] || exit 4
for s in ${STEPS:-verify ar}; do
  steps=b8; [ $s = b1 ] && steps=b1
  echo "=== $s"
  timeout 170 $NCU --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base --log-file /tmp/ncu_$s.csv \
    $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 64 --iters 2 --compiled all \
    --steps $steps --profile-step $s 2>&1 | grep -E "^\| B|profiling window|rror" | head -12
  xz -c /tmp/ncu_$s.csv > $OUT/ncu_$s.csv.xz
  python3 scripts/gpu/ncu_summary.py /tmp/ncu_$s.csv "$s step" | head -45
done
} 2>&1 | tee $OUT/r29.txt
