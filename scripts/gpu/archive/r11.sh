#!/bin/bash
# After r10.sh: fine-tune the shipped head on every cache in /tmp/cs, two variants side by side on
# the one GPU (the head's step is overhead-bound, so they barely slow each other): batch 24 and
# batch 48, 10,000 steps at lr 3e-4, checkpoints every 2,000; each ends with the real-cycle
# evaluation on the 16 held-out prompts. The heads come back in $OUT.
set -u
. scripts/gpu/env.sh
X=/tmp/x
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
EXTRA=$(ls /tmp/cs/*.safetensors | grep -v '/p1s0\.')
common="-m $X/smol --data /tmp/d/data/train --objective kl --seq-len 256 --seed 5 --chat-skip 0 \
  --text-tokens 1000000 --chat-prompts ${SLICE:-2048} --sampled-fraction 0.5 --answer-tokens 192 \
  --cache /tmp/cs/p1s0.safetensors --extra-data $EXTRA --init-head assets/smollm2-135m-instruct.mtp.safetensors \
  --steps ${STEPS:-10000} --lr ${LR:-3e-4} --store bf16 --eval /tmp/d/data/heldout.jsonl --eval-prompts 16 \
  --eval-tokens 128 --eval-every 2500 --checkpoint-every 2000"
for v in a:24 b:48; do
  n=${v%%:*}; bs=${v##*:}
  timeout ${LIMIT:-560} $B train-mtp $common --batch $bs --out $OUT/h$n.safetensors --checkpoint-dir /tmp/ck$n \
    --report $OUT/h$n.json > $OUT/train-$n.log 2>&1 &
done
wait
for n in a b; do
  echo "== $n"; tr '\r' '\n' < $OUT/train-$n.log | grep -v TMA | grep -v "^\s*$" | awk '!seen[$1 $2]++ || /accept|step|wrote|error|Error/' | tail -14
done
ls -la /tmp/cka /tmp/ckb 2>/dev/null | head
