#!/bin/bash
# Session 28, the call after r45.sh on the same machine (no carry; run then as this one line):
# mlx-lm again (its first process, in r45, spent its limit compiling), then cohort with the
# add-norm kernel off (the default since).
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx; . scripts/gpu/q36_arms.sh; { mlx 230; coh_env COHORT_ADD_NORM_KERNEL=0 | grep -vE "^graph of|^measuring|^geometry"; } 2>&1 | tee $OUT/r46.txt
