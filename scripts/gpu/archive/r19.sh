#!/bin/bash
# Where a step's time goes on the H200 at the real geometry (issue 9's profile; no Nsight Systems
# there): each step's graph counted by primitive before evaluation (`--graph-stats`), the B1 step
# split into graph built / handed to the device / done, and the B8 AR step beside the B8 cycle.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
{
timeout 400 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 20 \
  --compiled all,none --graph-stats --interleave-b1 --json $OUT/r19.json 2>&1 | grep -vE "^  \[|TMA"
} 2>&1 | tee $OUT/r19.txt
save_ptx
