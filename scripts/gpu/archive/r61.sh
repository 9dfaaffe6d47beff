#!/bin/bash
# Session 31, right after r60.sh on the same machine (no carry): mlx-lm's second process (its
# kernels compiled by r60's) and cohort again on the shared checkpoint, completing cohort,
# mlx-lm, cohort, mlx-lm, cohort over the two calls.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/q36_arms.sh
{
echo "=== mlx-lm"
time (timeout 140 $PY scripts/gpu/q36_mlx_lm.py bench --model $M --prompt 512 --gen 64 --rounds 3 2>&1 | grep -v TMA | tail -4)
echo "=== cohort"
env COHORT_MOE_GROUPED=0 timeout 110 $B bench-step -m $M --gdn-routes kernel --prefill 512 --iters 30 --compiled all 2>&1 | grep -vE "^  \[|TMA|^graph of|^measuring|^geometry" | cut -c1-200
} 2>&1 | tee $OUT/r61.txt
