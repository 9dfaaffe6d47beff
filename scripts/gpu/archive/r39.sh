#!/bin/bash
# Session 27, first measuring call (after `cp .gpu/w1/wheel.a /tmp/x/`; carry .gpu/w2 .gpu/bin
# .gpu/ptx .gpu/kold): the expert kernels rewritten to issue every load of a warp's rows at once
# (kernels/affine_dot.cuh), side by side with session 26's (.gpu/kold: kernels/ with those three
# files as they were, from prepare.sh), each arm a fresh process on the same synthetic weights at
# the real geometry; COHORT_MOE_KERNEL=1 sends the B8 AR step and the verify through the kernels
# too. The bench also times B1 pipelined as the engine now decodes greedy rows.
set -u
. scripts/gpu/wheel.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 30 --compiled all"
arm() { echo "=== cohort, $*"; env "$@" timeout 110 $B bench-step $S 2>&1 | grep -vE "^  \[|TMA" | cut -c1-300; }
{
arm COHORT_DEFAULTS=1
save_ptx
arm COHORT_KERNEL_DIR=$PWD/.gpu/kold
arm COHORT_MOE_KERNEL=1
arm COHORT_MOE_KERNEL=1 COHORT_KERNEL_DIR=$PWD/.gpu/kold
arm COHORT_DEFAULTS=1
} 2>&1 | tee $OUT/r39.txt
save_ptx
