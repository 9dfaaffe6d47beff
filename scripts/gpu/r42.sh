#!/bin/bash
# Session 28, third call, right after r41.sh on the same machine (carry .gpu/bin .gpu/ptx; the
# wheel's parts are in /tmp/x): the add-norm kernel (one node for each residual sum and the norm
# after it) on (the CUDA default) and off, each arm a fresh process on the same synthetic weights
# at the real geometry, in ABBA order; then both in one process, B1 steps interleaved.
set -u
. scripts/gpu/wheel.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 30 --compiled all"
arm() { echo "=== cohort, $*"; env "$@" timeout 120 $B bench-step $S --graph-stats 2>&1 | grep -vE "^  \[|TMA" | cut -c1-400; }
{
arm COHORT_DEFAULTS=1
arm COHORT_ADD_NORM_KERNEL=0
arm COHORT_ADD_NORM_KERNEL=0
arm COHORT_DEFAULTS=1
echo "=== cohort, interleaved B1, add-norm kernel on and off"
timeout 110 $B bench-step $S --steps b1 --interleave-b1 --add-norm on,off --iters 40 2>&1 | grep -vE "^  \[|TMA" | tail -8
} 2>&1 | tee $OUT/r42.txt
save_ptx
