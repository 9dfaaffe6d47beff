#!/bin/bash
# The host's cost of one node of each kind on the H200 (`bench-step --node-costs`, bf16, B1
# shapes of the real geometry), then B1 steps alone (`--steps b1`) of the binaries before
# (.gpu/bin0) and after (.gpu/bin) the node cuts, alternating in fresh processes, 4 each.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin,
# .gpu/bin0, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
xz -dc .gpu/bin0/cohort.xz > /tmp/cohort0 && chmod +x /tmp/cohort0
{
timeout 120 $B bench-step --node-costs --json $OUT/node_costs.json 2>&1 | grep -v TMA
timeout 120 $B bench-step --node-costs 2>&1 | grep -v TMA | tail -10
for a in old new new old old new new old; do
  if [ $a = old ]; then bin=/tmp/cohort0; else bin=$B; fi
  echo "=== $a"
  timeout 100 $bin bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 40 \
    --compiled all --steps b1 2>&1 | grep -E "^B1 step graph|^\| B1"
done
} 2>&1 | tee $OUT/r21.txt
save_ptx
