#!/bin/bash
# Session 23's kernels on the H200: the fused Gated DeltaNet front and the MoE router kernel
# against float64 references (`device --check-kernels`), the whole Qwen3.5 path with them against
# mlx-lm's logits and greedy tokens on the fixtures (the compiled_blocks test binary, run here on
# MLX CUDA), then B1 steps of stacked/unstacked models x fused kernels on/off interleaved in one
# process at the real geometry, and the full bench-step figures with everything on.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin,
# .gpu/tbin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
mkdir -p /work && ln -sfn $PWD /work/main
{
echo "=== check-kernels"
timeout 240 $B device --check-kernels 2>&1 | grep -v TMA
for t in compiled_blocks gdn_kernel moe_router; do
  xz -dc .gpu/tbin/$t.xz > /tmp/$t && chmod +x /tmp/$t
  echo "=== test $t (MLX CUDA)"
  timeout 200 /tmp/$t 2>&1 | grep -vE "TMA|^$" | tail -8
done
echo "=== interleaved B1: stacking x fused kernels"
timeout 300 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 40 \
  --compiled all --stacking on,off --fused-kernels on,off --interleave-b1 --steps b1 --graph-stats 2>&1 \
  | grep -E "^\| (On|Off)|^graph of|^B1 step graph|^\| B1"
} 2>&1 | tee $OUT/r24.txt
save_ptx
