#!/bin/bash
# Session 30, third machine. Before it: `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry
# .gpu/w1); this call carries .gpu/w2 .gpu/bin .gpu/tbin .gpu/ptx. The expert kernels on by
# default for every block (four channels a warp in the down kernel above two tokens, one in the
# up kernel): their CUDA tests and the model against mlx-lm with the new default, then the full
# bench-step figures in fresh processes, the defaults against COHORT_MOE_KERNEL=0, ABA.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 20"
{
echo "=== test moe_router (the expert kernel tests), one at a time, TF32 off"
(cd /tmp; MLX_ENABLE_TF32=0 timeout 200 /tmp/moe_router --test-threads=1 expert_kernels verify_sized 2>&1 | summary 12)
cuda_test qwen35_reference 100
for m in default 0 default; do
  echo "=== bench-step, COHORT_MOE_KERNEL=$m"
  env $([ $m = 0 ] && echo COHORT_MOE_KERNEL=0) timeout 120 $B bench-step $S --graph-stats 2>&1 | grep -vE "^  \[|TMA" | grep -E "^\||prefill|tok/s|bandwidth|handed|graph of"
done
} 2>&1 | tee $OUT/r54.txt
save_ptx
