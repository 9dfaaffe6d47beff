#!/bin/bash
# The MoE expert kernels (model/moe_experts.rs, off by default) at the real geometry, after
# r28 has checked them against float64 (device --check-kernels) on what r28 left in /tmp:
# 1. B1 steps with the expert kernels on and off interleaved in one process, with the nodes of
#    each arm's step (--graph-stats);
# 2. the full bench-step figures (B1, B8 draft / verify / AR) in two fresh processes, the expert
#    kernels on then off, so the B8 steps, which the interleaved arms do not cover, are compared
#    on the same machine minutes apart.
set -u
if [ -x /tmp/cohort ] && [ -d /tmp/site/mlx ]; then . scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx; else . scripts/gpu/wheel.sh; fi
{
echo "=== interleaved B1: expert kernels on, off"
timeout 200 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 30 \
  --compiled all --experts-kernel on,off --interleave-b1 --steps b1 --graph-stats 2>&1 \
  | grep -E "^\| (On|Off|default)|^graph of|^B1 step graph|^\| B1|rror"
for k in 1 0; do
  echo "=== full figures, COHORT_MOE_KERNEL=$k"
  COHORT_MOE_KERNEL=$k timeout 180 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 \
    --iters 10 --compiled all --graph-stats 2>&1 | grep -vE "^  \[|TMA" | cut -c1-400
done
} 2>&1 | tee $OUT/r30.txt
save_ptx
