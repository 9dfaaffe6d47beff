#!/bin/bash
# Session 29, first measuring call. Before it, on the same machine:
# `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1); this call carries .gpu/w2
# .gpu/bin .gpu/tbin .gpu/ptx. The gated norm folded into the fused mixer front (and its
# padded product read in place): the CUDA tests of the kernel and of the model against mlx-lm,
# then the fold on and off side by side in one process, B1 steps and B8 cycles + AR steps
# interleaved, with each arm's B1 graph counted.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
mkdir -p /tmp/keep && cp -r scripts /tmp/keep/
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
{
cuda_test gdn_kernel 150
cuda_test qwen35_reference 120
echo "=== cohort, interleaved B1 and B8, mixer norm folded on and off"
timeout 240 $B bench-step $S --steps b1 --interleave-b1 --interleave-b8 --mixer-norm on,off --graph-stats --iters 60 2>&1 | grep -vE "^  \[|TMA" | tail -40
} 2>&1 | tee $OUT/r48.txt
save_ptx
