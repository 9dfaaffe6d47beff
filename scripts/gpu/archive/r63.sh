#!/bin/bash
# Prepared in session 31 for the next session (not run). Before it: `mkdir -p /tmp/x && cp
# .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1); this call carries .gpu/w2 .gpu/bin .gpu/tbin
# .gpu/ptx, from `bash scripts/gpu/prepare.sh attention_kernel qwen35_reference` (and a .gpu/ptx
# brought back by an earlier call, if any: on an empty cache give the first bench-step 300 s).
# The short-block cohort attention kernel (kernels/attention_short.cu, off by default): its
# CUDA test against float64, the model against mlx-lm with it forced on, then fresh processes
# with it on and off (the verify's node count and times), B8 steps with it on and off interleaved in
# one process (`--attention-kernel on,off`), then ncu over one verify each way.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 15 --graph-stats"
fig() { grep -vE "^  \[|TMA" | grep -E "^\| B|tok/s|bandwidth \(|handed|graph of a B8 (verify|AR)|acceptance 0.6" | cut -c1-200; }
{
cuda_test attention_kernel 120
echo "=== qwen35_reference with the kernel forced on"
(cd /tmp; COHORT_ATTENTION_KERNEL=1 MLX_ENABLE_TF32=0 timeout 110 /tmp/qwen35_reference --test-threads=1 2>&1 | summary 12)
for k in 1 0; do
  echo "=== bench-step, COHORT_ATTENTION_KERNEL=$k"
  env COHORT_ATTENTION_KERNEL=$k timeout 120 $B bench-step $S 2>&1 | fig
done
echo "=== B8 cycles and AR steps interleaved in one process, the kernel on and off"
timeout 150 $B bench-step ${S/--graph-stats/} --steps b8 --interleave-b8 --attention-kernel on,off 2>&1 | grep -vE "^  \[|TMA" | tail -5
save_ptx
export NCU_ROWS=12; . scripts/gpu/ncu_arm.sh
arm verify_attention_kernel verify COHORT_ATTENTION_KERNEL=1
arm verify_sdpa verify COHORT_ATTENTION_KERNEL=0
} 2>&1 | tee $OUT/r63.txt
tar -cJf $OUT/ncu63.tar.xz -C /tmp $(cd /tmp; ls ncu_*.csv)
