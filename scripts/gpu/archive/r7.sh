#!/bin/bash
# Unpack the bundle (unpack.sh), then train-mtp's batched answering on the default model: this
# binary (packed KV, every row of a chunk stepping together) against the older one in .gpu/bin
# (active rows only, per-row attention), ABBA, 64 chat prompts x up to 64 tokens at B64.
set -u
. scripts/gpu/env.sh
. scripts/gpu/unpack.sh
cp .gpu/bin/cohort /tmp/old && chmod +x /tmp/old
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
for bin in $B /tmp/old /tmp/old $B; do
  rm -rf /tmp/t && mkdir -p /tmp/t
  timeout 120 $bin train-mtp --model $X/smol --out /tmp/t/h.safetensors --data $X/chat64.jsonl --text-tokens 0 --chat-prompts 64 \
    --answer-tokens 64 --gen-batch 64 --steps 1 --eval-every 1000 2>&1 | tr '\r' '\n' | grep -v TMA | grep "answer tokens" | tail -1 | sed "s|^|$bin: |"
done
