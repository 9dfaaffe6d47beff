#!/bin/bash
# Call 6: train the default model's MTP head on the GPU (kl objective, more data than the CPU run).
set -u
. scripts/gpu/env.sh
mkdir -p /tmp/d && tar xJf /tmp/x/data.tar.xz -C /tmp/d
timeout ${TRAIN_LIMIT:-560} $B train-mtp -m /tmp/m/smol --out $OUT/head.safetensors --store f32 --data /tmp/d/data/train \
  --objective kl --steps ${STEPS:-3000} --batch 16 --seq-len 256 --lr 1e-3 --seed 0 \
  --text-tokens ${TEXT:-600000} --chat-prompts ${CHAT:-1500} --answer-tokens 192 --gen-batch 64 \
  --cache /tmp/distill.safetensors --eval /tmp/d/data/heldout.jsonl --eval-prompts 16 --eval-tokens 128 \
  --eval-every 1000 --checkpoint-every 500 --checkpoint-dir $OUT/ckpt > $OUT/train.log 2>&1
echo "rc $?"; tr '\r' '\n' < $OUT/train.log | grep -v TMA | tail -40
