#!/bin/bash
# Session 30, first measuring call (session 29's r48.sh, which it replaces, with room for a fresh machine's empty MLX JIT
# cache: the .gpu/ptx of earlier sessions did not survive). Before it, on the same machine:
# `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1); this call carries .gpu/w2
# .gpu/bin .gpu/tbin. The gated norm folded into the fused mixer front: the CUDA tests of the
# kernel and of the model against mlx-lm, then the fold on and off side by side in one process,
# B1 steps and B8 cycles + AR steps interleaved, with each arm's B1 graph counted.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
{
cuda_test gdn_kernel 170
cuda_test qwen35_reference 120
echo "=== cohort, interleaved B1 and B8, mixer norm folded on and off"
timeout 280 $B bench-step $S --steps b1 --interleave-b1 --interleave-b8 --mixer-norm on,off --graph-stats --iters 40 2>&1 | grep -vE "^  \[|TMA" | tail -45
} 2>&1 | tee $OUT/r49.txt
save_ptx
