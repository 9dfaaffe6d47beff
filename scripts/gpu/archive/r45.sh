#!/bin/bash
# Session 28, the call after r44.sh on the same machine (no carry): cohort against mlx-lm on one
# mlx-lm-made checkpoint at the real geometry, as r33.sh: make, cohort with the engine's
# defaults, mlx-lm, cohort again (ABA: the two cohort arms bracket mlx-lm's).
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/q36_arms.sh
{
echo "=== make"
time (timeout 200 $PY scripts/gpu/q36_mlx_lm.py make --out $M 2>&1 | grep -v TMA | tail -3)
coh_env COHORT_DEFAULTS=1 | grep -vE "^graph of|^measuring"
mlx 170
coh_env COHORT_DEFAULTS=1 | grep -vE "^graph of|^measuring|^geometry"
} 2>&1 | tee $OUT/r45.txt
