#!/bin/bash
# MLX CUDA's graph settings at the real geometry (issue 9): MLX captures kernels into CUDA graphs
# of at most MLX_MAX_OPS_PER_BUFFER nodes and keeps MLX_CUDA_GRAPH_CACHE_SIZE instantiated graphs,
# clearing them all when the cache overflows. Each setting in its own process, mirrored order,
# the compiled blocks on, plus B1 steps of plain and compiled interleaved.
set -u
. scripts/gpu/wheel.sh
G="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 20 --compiled none,all --interleave-b1"
run() { echo "=== $1"; env $1 timeout 100 $B bench-step $G 2>/dev/null | grep -E "B1 AR step|B8 verify|B8 draft|B8 cycle|^\| (None|All) |graph built"; }
A="X=0" B_="MLX_CUDA_GRAPH_CACHE_SIZE=8192" C="MLX_CUDA_GRAPH_CACHE_SIZE=8192 MLX_MAX_OPS_PER_BUFFER=100" D="MLX_USE_CUDA_GRAPHS=0"
for s in "$A" "$B_" "$C" "$D" "$D" "$C" "$B_" "$A"; do
  run "$s"
done 2>&1 | tee $OUT/settings.txt
save_ptx
