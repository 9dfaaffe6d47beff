#!/bin/bash
# For the next session: what session 25 could not run (its device time was spent), in the order
# that tells most if a call is cut short. Calls: the two wheel calls, then this (carry .gpu/bin
# .gpu/tbin .gpu/ptx; ptx.tar.xz came back from r31, so MLX's JIT kernels need not compile again).
# 1. full figures in fresh processes, back to back: the defaults, then each of this session's
#    changes turned off alone: rows' recurrent states stacked row by row (COHORT_GDN_BATCH=0,
#    model/gdn_batch.rs), products batched (COHORT_FLAT_PRODUCTS=0, model/product.rs);
# 2. device --check-kernels with the model's product routes (down projection with built rows on
#    CUDA, one-group-a-row products through the dequantized weight);
# 3. the CUDA test binaries, one test at a time, float32 matmuls off TF32: every fixture against
#    mlx-lm (qwen35_reference), moe_router (its bf16 verify-sized block included), gdn_kernel;
# 4. ncu over one verify with the defaults.
# Here first: bash scripts/gpu/prepare.sh qwen35_reference gdn_kernel moe_router
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
figures() {
  echo "=== full figures, $*"
  env "$@" timeout 120 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 \
    --iters 20 --compiled all --graph-stats 2>&1 | grep -vE "^  \[|TMA" | cut -c1-300
}
{
figures COHORT_DEFAULTS=1
figures COHORT_GDN_BATCH=0
figures COHORT_FLAT_PRODUCTS=0
figures COHORT_DEFAULTS=1
echo "=== device --check-kernels"
timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel"
for t in qwen35_reference moe_router gdn_kernel; do cuda_test $t 90; done
} 2>&1 | tee $OUT/r32.txt
STEPS="verify" bash scripts/gpu/r29.sh 2>&1 | grep -v "^=== ncu" | head -40
save_ptx
