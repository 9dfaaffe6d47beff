#!/bin/bash
# Unpack the bundle (MLX CUDA and Python wheels, the default model, the binary) sent in parts to
# /tmp/x, then batched cohort attention at the real Qwen3.6-35B-A3B geometry: one masked attention
# over the packed rows against one chain per row (ABBA), fused GDN kernel, in one process.
set -u
. scripts/gpu/env.sh
. scripts/gpu/unpack.sh
$B --version
timeout 500 $B bench-step --synthetic qwen36-35b-a3b --prefill 1024 --iters 10 --gdn-routes kernel --attention batched,rows,rows,batched --json $OUT/step.json 2>&1 | grep -v TMA | tail -80
