#!/bin/bash
# Session 25's second machine: the fixes for what r28 / r29 / r30 found, checked and timed.
#   product::quantized takes x as rows (MLX CUDA ran [8, 2, H] as 8 products of 2 rows, each
#   reading the weight) and avoids MLX's one-group-a-row kernel (wrong on the fixtures); the
#   down projection builds its own gather rows on CUDA (held per-pair rows were wrong in bf16);
#   the expert kernels serve blocks of <= 2 tokens by default.
# 1. device --check-kernels (the expert kernels first now);
# 2. the CUDA test binaries with float32 matmuls off TF32 (MLX CUDA's default rounds them to
#    TF32, beyond the 1e-4 the float tests hold two routes to): the MoE fixture against mlx-lm,
#    moe_router, gdn_kernel;
# 3. full bench-step figures, products as rows (new default) then batched (COHORT_FLAT_PRODUCTS=0),
#    two fresh processes back to back;
# 4. ncu over one verify with the new defaults.
# Calls: the two wheel calls, then this (carry .gpu/bin .gpu/tbin .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
{
echo "=== device --check-kernels"
timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel"
cuda_test qwen35_reference 90
for t in moe_router gdn_kernel; do cuda_test $t 70; done
for f in 1 0; do
  echo "=== full figures, COHORT_FLAT_PRODUCTS=$f"
  COHORT_FLAT_PRODUCTS=$f timeout 130 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 \
    --iters 10 --compiled all 2>&1 | grep -vE "^  \[|TMA|^graph of" | cut -c1-300
done
} 2>&1 | tee $OUT/r31.txt
STEPS="verify" bash scripts/gpu/r29.sh 2>&1 | grep -v "^=== ncu" | head -40
save_ptx
