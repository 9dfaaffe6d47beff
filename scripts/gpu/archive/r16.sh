#!/bin/bash
# Is the compiled MoE block's 2e-2 logit gap on the H200 (4 layers, bf16, r14.sh) rounding or a
# different function? Each arm's first B1 logits against the first (plain) arm's: one layer in
# bf16 (no depth to amplify a difference), then 1 and 4 layers in float32 (TF32 off).
set -u
. scripts/gpu/wheel.sh
G="--synthetic qwen36-35b-a3b --gdn-routes kernel --vocab 4096 --prefill 64 --iters 3"
for spec in "1 bfloat16 none,moe,gdn,none" "1 float32 none,moe,gdn,none" "4 float32 none,all,none,moe,gdn"; do
  set -- $spec
  echo "=== $1 layers, $2, arms $3"
  MLX_ENABLE_TF32=0 timeout 150 $B bench-step $G --layers $1 --dtype $2 --compiled $3 2>/dev/null | grep -E "compiled blocks|first B1"
done 2>&1 | tee $OUT/check16.txt
save_ptx
