#!/bin/bash
# Unpack the bundle (unpack.sh), then distil more training data for the default model's MTP head:
# 2M text tokens plus the target's own answers to ${CHAT:-2000} chat prompts (half greedy, half at
# the default sampler), cached in /tmp/c1.safetensors for r9.sh (the machine keeps /tmp while held).
set -u
. scripts/gpu/env.sh
. scripts/gpu/unpack.sh
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout ${LIMIT:-520} $B train-mtp -m $X/smol --out /tmp/h0.safetensors --data /tmp/d/data/train --objective kl \
  --steps 1 --batch 24 --seq-len 256 --seed 3 --text-tokens ${TEXT:-2000000} --chat-prompts ${CHAT:-2000} \
  --answer-tokens 192 --gen-batch ${GEN_BATCH:-128} --cache /tmp/c1.safetensors > $OUT/distill.log 2>&1
echo "rc $?"; tr '\r' '\n' < $OUT/distill.log | grep -v TMA | grep -v "^\s*$" | awk '!seen[$1 $2]++ || /tok|done|cached|error|Error/' | tail -30
ls -la /tmp/c1.safetensors
