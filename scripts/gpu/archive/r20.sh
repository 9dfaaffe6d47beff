#!/bin/bash
# Fewer nodes a step (issue 9), side by side at the real geometry: the binary before (.gpu/bin0)
# and after (.gpu/bin) the MoE block's gather rows held evaluated and the mixer's four input
# projections stacked into one product, in fresh processes, old/new alternating (ABBAAB), then the
# new binary with the stacking off (COHORT_FUSE_GDN_IN=0) to part the two changes.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin,
# .gpu/bin0, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
xz -dc .gpu/bin0/cohort.xz > /tmp/cohort0 && chmod +x /tmp/cohort0
arm() { # label binary [env...]
  local label=$1 bin=$2; shift 2
  echo "=== $label"
  env "$@" timeout 120 $bin bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 20 \
    --compiled all --graph-stats 2>&1 | grep -E "^graph of|^B1 step graph|^\| B|^B1 AR|prefill 512" | cut -c1-400
}
{
for a in old new new old old new; do
  if [ $a = old ]; then arm old /tmp/cohort0 X=1; else arm new $B X=1; fi
done
arm new-unstacked $B COHORT_FUSE_GDN_IN=0
arm new-unstacked $B COHORT_FUSE_GDN_IN=0
} 2>&1 | tee $OUT/r20.txt
save_ptx
