#!/bin/bash
# After r8.sh: fine-tune the shipped head on r8's cache (kl), evaluate it on held-out prompts (the
# real MTP cycle), then on the GPU with the new head: B1 AR against B1 MTP on 8 held-out chat
# prompts, and those 8 as one MTP cohort against serial MTP runs.
set -u
. scripts/gpu/env.sh
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
timeout ${TRAIN_LIMIT:-330} $B train-mtp -m $X/smol --out $OUT/head.safetensors --store bf16 --data /tmp/d/data/train \
  --objective kl --steps ${STEPS:-8000} --batch 24 --seq-len 256 --lr ${LR:-5e-4} --seed 3 --text-tokens ${TEXT:-2000000} \
  --chat-prompts ${CHAT:-2000} --answer-tokens 192 --cache /tmp/c1.safetensors --init-head assets/smollm2-135m-instruct.mtp.safetensors \
  --eval /tmp/d/data/heldout.jsonl --eval-prompts 16 --eval-tokens 128 --eval-every 100000 --checkpoint-every 100000 \
  --checkpoint-dir /tmp/ck > $OUT/train.log 2>&1
echo "rc $?"; tr '\r' '\n' < $OUT/train.log | grep -v TMA | grep -v "^\s*$" | awk '!seen[$1 $2]++ || /accept|loss|done|error|Error/' | tail -30
M=/tmp/mh && mkdir -p $M && cp $X/smol/* $M/ && cp $OUT/head.safetensors $M/mtp.safetensors
python3 - > /tmp/ho.jsonl <<'PY'
import json
qs = [json.loads(l)["prompt"] for l in open("/tmp/d/data/heldout.jsonl")][16:24]
print(json.dumps({"id": "warm", "prompt": "Hello", "chat": True, "max_tokens": 8, "temperature": 0}))
for i, q in enumerate(qs):
    print(json.dumps({"id": f"q{i}", "prompt": q, "chat": True, "max_tokens": 128, "temperature": 0, "ignore_eos": True}))
PY
summ() { python3 -c "
import json,statistics as st
rows=[json.loads(l) for l in open('$1') if l.startswith('{')][1:]
s=[r['stats'] for r in rows]; acc=sum(x.get('accepted_drafts',0) for x in s); rej=sum(x.get('rejected_drafts',0) for x in s)
print('$2', s[0]['route'], 'median row decode tok/s', round(st.median(x['decode_tok_s'] for x in s),1), 'aggregate', round(sum(len(r['token_ids'])-1 for r in rows)/max(x['decode_s'] for x in s) if '$2'.startswith('B8') else 0,1), 'acceptance', round(acc/(acc+rej),3) if acc+rej else None, 'widths', sorted({x.get('real_width') for x in s}))
"; }
for round in 1 2; do
  for mode in ar mtp; do
    COHORT_MTP_ALLOW_INEXACT=1 timeout 100 $B generate -m $M -i /tmp/ho.jsonl --scheduler serial --generation-mode $mode > /tmp/o.jsonl 2>/tmp/e.txt || tail -3 /tmp/e.txt
    summ /tmp/o.jsonl "B1-$mode-r$round"
  done
  COHORT_MTP_ALLOW_INEXACT=1 timeout 100 $B generate -m $M -i /tmp/ho.jsonl --scheduler cohort --generation-mode mtp > /tmp/o.jsonl 2>/tmp/e.txt || tail -3 /tmp/e.txt
  summ /tmp/o.jsonl "B8-mtp-r$round"
done
