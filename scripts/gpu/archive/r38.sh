#!/bin/bash
# Session 26, on a fresh machine after `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w2 .gpu/bin
# .gpu/ptx): device --check-kernels with MLX_ENABLE_TF32 unset, which the binary now turns off
# itself, then with it set to 1. The run unset hit its 170 s limit: a fresh machine compiles
# MLX's kernels again. Next time give it 300 s and keep the whole output.
set -u
. scripts/gpu/wheel.sh > /dev/null 2>&1
unset MLX_ENABLE_TF32
{
echo "=== check-kernels, MLX_ENABLE_TF32 unset"
time (timeout 170 $B device --check-kernels 2>&1 | grep -vE "TMA|^quantized product|^gather" | tail -12; echo "rc ${PIPESTATUS[0]}")
echo "=== check-kernels, MLX_ENABLE_TF32=1"
MLX_ENABLE_TF32=1 timeout 120 $B device --check-kernels 2>&1 | grep -E "fixture size|error" | head -4
} 2>&1 | tee $OUT/r38.txt
