#!/bin/bash
# Session 28, the call after r46.sh on the same machine (no carry; run then as this one line):
# cohort, mlx-lm, cohort (add-norm kernel off), the figures' lines only.
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx; . scripts/gpu/q36_arms.sh; F='^graph of|^measuring|^geometry|^memory|^  projected|^peak|^$|^\| ---|^\| step'; { coh_env COHORT_ADD_NORM_KERNEL=0 | grep -vE "$F"; mlx 150; coh_env COHORT_ADD_NORM_KERNEL=0 | grep -vE "$F"; } 2>&1 | tee $OUT/r47.txt
