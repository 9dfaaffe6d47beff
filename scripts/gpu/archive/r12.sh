#!/bin/bash
# The compiled MoE block at the real Qwen3.6-35B-A3B geometry (issue 9): first 8 layers, one arm
# at a time with bench-step's progress lines (where a first call stalls), then all 40 layers ABBA.
set -u
. scripts/gpu/wheel.sh
G="--synthetic qwen36-35b-a3b --gdn-routes kernel"
for moe in ops compiled; do
  timeout ${SMALL_LIMIT:-150} $B bench-step $G --layers 8 --prefill 128 --iters 8 --moe $moe 2>&1 | tee -a $OUT/small.txt
done
save_ptx
timeout ${BIG_LIMIT:-240} $B bench-step $G --prefill 1024 --iters 10 --moe ops,compiled,compiled,ops --json $OUT/big.json 2>&1 | tee $OUT/big.txt
save_ptx
