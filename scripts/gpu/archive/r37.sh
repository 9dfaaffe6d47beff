#!/bin/bash
# Session 26's last call, on a fresh machine after `cp .gpu/w1/wheel.a /tmp/x/`: carry .gpu/w2
# .gpu/bin .gpu/ptx .gpu/tbin. The moe_router binary with its bf16 test holding both routes to
# float32 logits, that test's figures (--nocapture), then ncu over a B1 step and a B8 AR step.
set -u
. scripts/gpu/wheel.sh > /dev/null 2>&1
. scripts/gpu/test_bins.sh
{
cuda_test moe_router 120
(cd /tmp; MLX_ENABLE_TF32=0 /tmp/moe_router --test-threads=1 --nocapture the_ops_route_gives 2>&1 | grep "bf16 logits")
STEPS="b1 ar" timeout 300 bash scripts/gpu/r29.sh 2>&1 | grep -v "^=== ncu" | grep -E "^###|^\| (mlx|nvjet|cutlass|cublas)|^\| kernel" | head -30
} 2>&1 | tee $OUT/r37.txt
