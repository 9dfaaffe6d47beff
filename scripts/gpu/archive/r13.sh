#!/bin/bash
# Compiled blocks at the real Qwen3.6-35B-A3B geometry (issue 9): plain ops, the compiled MoE
# block, the compiled Gated DeltaNet mixer and both, each arm twice in mirrored order, on one
# random-weight model; each arm's first B1 logits are checked against the first arm's.
set -u
. scripts/gpu/wheel.sh
timeout ${LIMIT:-400} $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 1024 --iters 20 \
  --compiled ${ARMS:-none,all,moe,gdn,gdn,moe,all,none} --json $OUT/arms.json 2>&1 | tee $OUT/arms.txt
save_ptx
