#!/bin/bash
# Session 28, the call after r42.sh on the same machine (no carry; the binary, the wheel and the
# JIT cache are in /tmp): r42's last arm (B1 steps with the add-norm kernel on and off
# interleaved in one process; r42 passed --iters twice), then device --check-kernels to its end with MLX_ENABLE_TF32 unset, cohort's
# float32 default (r41 reached only the expert checks in 200 s).
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
{
echo "=== cohort, interleaved B1, add-norm kernel on and off"
timeout 110 $B bench-step $S --steps b1 --interleave-b1 --add-norm on,off --iters 40 2>&1 | grep -vE "^  \[|TMA" | tail -8
echo "=== check-kernels, MLX_ENABLE_TF32 unset"
(unset MLX_ENABLE_TF32; timeout 450 $B device --check-kernels 2>&1 | grep -vE "^  \[|TMA" | tail -60)
echo "exit $?"
} 2>&1 | tee $OUT/r43.txt
