#!/bin/bash
# Session 31, a fresh machine after r59 found the last one given back. Before it: the three wheel
# copies (w1, w3a, w3b, as r56's). Carries .gpu/w2 .gpu/bin .gpu/ptx (r56's cohort JIT cache).
# cohort against mlx-lm on one mlx-lm-made checkpoint: make, cohort, mlx-lm (3 rounds in one
# process, its first round compiling MLX's kernels: rounds 1-2 are the figures), cohort.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/wheel3.sh
. scripts/gpu/q36_arms.sh
{
echo "=== make"
time (timeout 120 $PY scripts/gpu/q36_mlx_lm.py make --out $M 2>&1 | grep -v TMA | tail -2)
coh_env COHORT_MOE_GROUPED=0 | grep -vE "^graph of|^measuring"
echo "=== mlx-lm"
time (timeout 330 $PY scripts/gpu/q36_mlx_lm.py bench --model $M --prompt 512 --gen 64 --rounds 3 2>&1 | grep -v TMA | tail -4)
coh_env COHORT_MOE_GROUPED=0 | grep -vE "^graph of|^measuring|^geometry"
} 2>&1 | tee $OUT/r60.txt
