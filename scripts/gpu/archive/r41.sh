#!/bin/bash
# Session 28, second call (after `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/`; carry .gpu/w2
# .gpu/bin .gpu/tbin): the CUDA test binaries first (the add-norm kernel's own test, the expert
# kernels as session 27 rewrote them in moe_router, every fixture against mlx-lm with the
# add-norm kernel in the model), then `device --check-kernels` with MLX_ENABLE_TF32 unset
# (cohort's float32 default, not yet seen to the end on the H200). Leaves the wheel's second part
# in /tmp/x for r42.sh and brings MLX's JIT cache back.
set -u
. scripts/gpu/wheel.sh
cp .gpu/w2/* /tmp/x/
. scripts/gpu/test_bins.sh
{
cuda_test add_norm 90
cuda_test moe_router 150
cuda_test qwen35_reference 120
(cd /tmp; MLX_ENABLE_TF32=0 timeout 100 /tmp/moe_router --test-threads=1 --nocapture the_ops_route_gives 2>&1 | grep "bf16 logits")
save_ptx
echo "=== check-kernels, MLX_ENABLE_TF32 unset"
(unset MLX_ENABLE_TF32; timeout 200 $B device --check-kernels 2>&1 | grep -vE "^  \[" | tail -50)
} 2>&1 | tee $OUT/r41.txt
save_ptx
