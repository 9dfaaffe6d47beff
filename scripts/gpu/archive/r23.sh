#!/bin/bash
# The held MoE gather rows against gather_qmm building its own, in one process: B1 steps of the
# two arms taken in turn (`--moe-rows held,built --interleave-b1`), so both see the same moments
# of a host whose speed moves between processes; two processes.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
{
for i in 1 2; do
  echo "=== process $i"
  timeout 150 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 60 \
    --compiled all --moe-rows held,built --interleave-b1 --steps b1 2>&1 | grep -E "^\| All|^B1 step graph|^\| B1"
done
} 2>&1 | tee $OUT/r23.txt
save_ptx
