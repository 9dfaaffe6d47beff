#!/bin/bash
# Why the MoE fixture's logits come out wrong on MLX CUDA (r26): `device --check-kernels`, which
# now also checks gather_qmm at the fixtures' sizes and the real geometry's against a float64
# product. Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel" | tee $OUT/r27.txt
