#!/bin/bash
# Session 31, right after r56.sh on what it left in /tmp (no carry; .gpu/kold travels with the
# tree's carry of r56 and stays in the working copy). The model against mlx-lm's own code with
# the new defaults, then full bench-step figures in fresh processes: NEW (this commit's
# kernels, the grouped up kernel at 2-32 tokens), OLD (.gpu/kold: codes through a conversion
# instruction, per-pair up kernel), CVT (this commit's codes, per-pair up kernel), NEW again.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/test_bins.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 15 --graph-stats"
NEW="COHORT_KERNEL_DIR=$PWD/kernels"
OLD="COHORT_KERNEL_DIR=$PWD/.gpu/kold COHORT_MOE_GROUPED=0"
CVT="COHORT_KERNEL_DIR=$PWD/kernels COHORT_MOE_GROUPED=0"
fig() { grep -vE "^  \[|TMA" | grep -E "^\| B|tok/s|bandwidth|handed|graph of a B8 (verify|AR)" | cut -c1-160; }
{
echo "=== mlx-lm warm-up"; tail -3 /tmp/mlx_warm.txt
cuda_test qwen35_reference 110
for k in NEW OLD CVT NEW; do
  echo "=== bench-step, $k: ${!k}"
  env ${!k} timeout 70 $B bench-step $S 2>&1 | fig
done
} 2>&1 | tee $OUT/r57.txt
save_ptx
