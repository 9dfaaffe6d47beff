#!/bin/bash
# B8 steps alone at the real geometry with each graph's handover timed (`--steps b8`): the
# verify and the B8 AR step, built / handed to the device / done, and their nodes by primitive.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
{
for i in 1 2; do
  echo "=== run $i"
  timeout 150 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 20 \
    --compiled all --steps b8 --graph-stats 2>&1 | grep -E "^graph of|handed|^\| B8|^B1 AR" | cut -c1-600
done
} 2>&1 | tee $OUT/r22.txt
save_ptx
