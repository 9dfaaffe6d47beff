#!/bin/bash
# Session 28, second machine, first measuring call. Before it, on the same machine:
# `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), `cp .gpu/w3a/* /tmp/x/`
# (carry .gpu/w3a), `cp .gpu/w3b/* /tmp/x/` (carry .gpu/w3b); this call carries .gpu/w2
# .gpu/bin .gpu/ptx. What one custom-kernel node costs the host against MLX's own
# (--node-costs), then the add-norm kernel on and off side by side in one process: B1 steps
# interleaved, and B8 cycles + AR steps interleaved on one cohort of rows (r43's interleaved B1
# had the kernel 0.66 ms slower a step). r45.sh follows with mlx-lm.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/wheel3.sh
mkdir -p /tmp/keep && cp -r scripts /tmp/keep/
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
{
echo "=== node costs, bf16"
timeout 60 $B bench-step --node-costs 2>&1 | grep -vE "TMA" | tail -14
echo "=== cohort, interleaved B1 and B8, add-norm kernel on and off"
timeout 200 $B bench-step $S --steps b1 --interleave-b1 --interleave-b8 --add-norm on,off --iters 60 2>&1 | grep -vE "^  \[|TMA" | tail -14
} 2>&1 | tee $OUT/r44.txt
save_ptx
