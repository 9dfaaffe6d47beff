#!/bin/bash
# Session 26, third call, right after r34.sh (carries nothing; the test binaries came with r33):
# device --check-kernels, the CUDA test binaries one test at a time with TF32 off, then ncu over
# one verify with the defaults (r29.sh).
set -u
. scripts/gpu/env.sh
export MLX_PTX_CACHE_DIR=/tmp/ptx
cp -r /tmp/keep/tbin .gpu/ 2>/dev/null
. scripts/gpu/test_bins.sh
{
echo "=== device --check-kernels"
timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel"
for t in qwen35_reference moe_router gdn_kernel; do cuda_test $t 90; done
} 2>&1 | tee $OUT/r35.txt
STEPS="verify" bash scripts/gpu/r29.sh 2>&1 | grep -v "^=== ncu" | head -40
