#!/bin/bash
# Session 30, fourth machine. Before it: `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry
# .gpu/w1), `cp .gpu/w2/* /tmp/x/` (carry .gpu/w2); this call carries .gpu/bin (9c7b540: rows
# hold their mixer state as a place in its batch), .gpu/bin0 (1656aa3) and .gpu/ptx. Full
# bench-step figures with graph counts in fresh processes, new, old, new.
set -u
. scripts/gpu/wheel.sh
xz -dc .gpu/bin0/cohort.xz > /tmp/cohort0 && chmod +x /tmp/cohort0
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 15 --graph-stats"
{
for b in $B /tmp/cohort0 $B; do
  echo "=== $b"
  timeout 60 $b bench-step $S 2>&1 | grep -vE "^  \[|TMA" | grep -E "^\| B|tok/s|bandwidth|handed|graph of a B8 (verify|AR)" | cut -c1-160
done
} 2>&1 | tee $OUT/r55.txt
