#!/bin/bash
# Session 26, the call after r34.sh (no carry; on what r33 left in /tmp): device --check-kernels
# with TF32 off, the bf16 verify-sized moe_router test with the load layouts off and on, mlx-lm
# again and cohort again (the last two arms of the side by side).
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
cp -r /tmp/keep/tbin .gpu/ 2>/dev/null
. scripts/gpu/test_bins.sh; . scripts/gpu/q36_arms.sh
{
echo "=== check-kernels TF32 off"
MLX_ENABLE_TF32=0 timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel|^MoE|^gather"
for L in "COHORT_PAD_PRODUCTS=0 COHORT_DENSE_PRODUCTS=0" "COHORT_DEFAULTS=1"; do
  echo "=== moe_router bf16 block, $L"
  (cd /tmp; env $L MLX_ENABLE_TF32=0 timeout 60 /tmp/moe_router --test-threads=1 the_ops_route_gives 2>&1 | summary 6)
done
mlx 200
coh_env COHORT_DEFAULTS=1 | grep -vE "^graph of|^measuring|^geometry"
} 2>&1 | tee $OUT/r36.txt
