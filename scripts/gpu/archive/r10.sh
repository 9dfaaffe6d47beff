#!/bin/bash
# Unpack the bundle (unpack.sh; a binary carried in .gpu/bin/cohort.xz replaces the bundle's), then
# answer the training chat prompts in slices of one shuffle (--chat-skip), one distillation cache
# each in /tmp/cs, until the call's ${BUDGET:-530} s run out: pass 1 (seed 5) answers every prompt
# once (half at the default sampler) with 1M text tokens in its first slice; pass 2 (seed 6) samples
# every prompt again. A slice cut short leaves no cache; slices already cached are kept, so a
# second call goes on where the first stopped (and skips the unpacking). r11.sh trains on them.
set -u
. scripts/gpu/env.sh
X=/tmp/x
if [ ! -x $B ] || [ ! -d /tmp/d/data ]; then
  . scripts/gpu/unpack.sh
  if [ -f .gpu/bin/cohort.xz ]; then xz -dc .gpu/bin/cohort.xz > $B && chmod +x $B; fi
fi
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
mkdir -p /tmp/cs
END=$((SECONDS + ${BUDGET:-530}))
SLICE=${SLICE:-2048}
PROMPTS=$(wc -l < /tmp/d/data/train/questions.jsonl)
slice() { # name seed skip text_tokens sampled_fraction
  [ -f /tmp/cs/$1.safetensors ] && return 0
  local left=$((END - SECONDS))
  [ $left -lt 60 ] && return 1
  timeout $left $B train-mtp -m $X/smol --out /tmp/h0.safetensors --data /tmp/d/data/train --objective kl \
    --steps 1 --batch 24 --seq-len 256 --seed $2 --chat-skip $3 --text-tokens $4 --chat-prompts $SLICE \
    --sampled-fraction $5 --answer-tokens 192 --gen-batch ${GEN_BATCH:-512} --distill-tokens 8192 \
    --cache /tmp/cs/$1.safetensors --checkpoint-dir /tmp/ck0 > $OUT/$1.log 2>&1
  local rc=$?
  [ $rc -ne 0 ] && rm -f /tmp/cs/$1.safetensors
  echo "$1 rc $rc at ${SECONDS}s: $(tr '\r' '\n' < $OUT/$1.log | grep -E '^(answering|distilling)' | grep -E 'tok/s|done|positions' | tail -2 | cut -c1-160 | tr '\n' '|')"
  return 0
}
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
for pass in 1 2; do
  for ((skip = 0; skip < PROMPTS; skip += SLICE)); do
    if [ $pass = 1 ]; then text=$([ $skip = 0 ] && echo 1000000 || echo 0); slice p1s$skip 5 $skip $text 0.5 || break 2
    else slice p2s$skip 6 $skip 0 1.0 || break 2; fi
  done
done
ls -la /tmp/cs; df -h /tmp | tail -1
