#!/bin/bash
# Session 28, on a fresh machine after `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry
# .gpu/w2 .gpu/bin .gpu/ptx): the add-norm kernel (one node for each residual sum and the norm
# after it) on (the CUDA default) and off, each arm a fresh process on the same synthetic weights
# at the real geometry, in ABBA order; then both in one process, B1 steps interleaved.
set -u
. scripts/gpu/wheel.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
arm() { echo "=== cohort, $*"; env "$@" timeout 120 $B bench-step $S --iters 30 --graph-stats 2>&1 | grep -vE "^  \[|TMA" | cut -c1-400; }
{
arm COHORT_DEFAULTS=1
arm COHORT_ADD_NORM_KERNEL=0
arm COHORT_ADD_NORM_KERNEL=0
arm COHORT_DEFAULTS=1
echo "=== cohort, interleaved B1, add-norm kernel on and off"
timeout 110 $B bench-step $S --steps b1 --interleave-b1 --add-norm on,off --iters 40 2>&1 | grep -vE "^  \[|TMA" | tail -8
} 2>&1 | tee $OUT/r42.txt
save_ptx
