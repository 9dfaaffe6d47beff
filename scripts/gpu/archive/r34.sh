#!/bin/bash
# Session 26, second call, right after r33.sh on what it left in /tmp (carries nothing): mlx-lm
# again, then cohort with the defaults and with each of this session's changes turned off alone:
# both load layouts (COHORT_PAD_PRODUCTS=0 COHORT_DENSE_PRODUCTS=0), rows' recurrent states
# stacked row by row (COHORT_GDN_BATCH=0, model/gdn_batch.rs); then the defaults again.
set -u
. scripts/gpu/env.sh
export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/q36_arms.sh
{
# mlx-lm's first process in r33 spent its 150 s compiling MLX's kernels.
time mlx 260
coh_env COHORT_DEFAULTS=1
coh_env COHORT_PAD_PRODUCTS=0 COHORT_DENSE_PRODUCTS=0
coh_env COHORT_GDN_BATCH=0
} 2>&1 | tee $OUT/r34.txt
