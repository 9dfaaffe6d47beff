#!/bin/bash
# Compiled blocks on the H200 (issue 9). First a check on 4 layers of the real geometry (three
# Gated DeltaNet layers and one attention layer, small vocabulary): each arm's first B1 logits
# against the plain arm's, with a repeated plain arm for the run-to-run noise. Then all 40 layers,
# ABBA, and B1 steps of the two arms interleaved (the host is noisy from one run to the next).
set -u
. scripts/gpu/wheel.sh
G="--synthetic qwen36-35b-a3b --gdn-routes kernel"
timeout 120 $B bench-step $G --layers 4 --vocab 4096 --prefill 128 --iters 4 --compiled none,all,none,moe,gdn 2>&1 | tee $OUT/check.txt
timeout ${LIMIT:-300} $B bench-step $G --prefill 1024 --iters 30 --compiled none,all,all,none --interleave-b1 \
  --json $OUT/arms.json 2>&1 | tee $OUT/arms.txt
save_ptx
