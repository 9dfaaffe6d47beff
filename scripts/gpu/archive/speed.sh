#!/bin/bash
# The default model with HEAD ($1, default the shipped head) on the H200: B1 AR against B1 MTP on
# 8 held-out chat prompts (17-24) x 128 tokens, greedy, EOS ignored, and those 8 as one MTP cohort;
# ${ROUNDS:-2} rounds, interleaved (the first also compiles CUDA kernels).
set -u
. scripts/gpu/env.sh
X=/tmp/x
export MLX_CUDA_GRAPH_CACHE_SIZE=8192
M=/tmp/mh && mkdir -p $M && cp $X/smol/* $M/ && cp ${1:-assets/smollm2-135m-instruct.mtp.safetensors} $M/mtp.safetensors
python3 - > /tmp/ho.jsonl <<'PY'
import json
qs = [json.loads(l)["prompt"] for l in open("/tmp/d/data/heldout.jsonl")][16:24]
print(json.dumps({"id": "warm", "prompt": "Hello", "chat": True, "max_tokens": 8, "temperature": 0}))
for i, q in enumerate(qs):
    print(json.dumps({"id": f"q{i}", "prompt": q, "chat": True, "max_tokens": 128, "temperature": 0, "ignore_eos": True}))
PY
summ() { python3 scripts/gpu/summ.py "$1" "$2"; }
for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
  for arm in serial:ar serial:mtp cohort:ar cohort:mtp; do
    s=${arm%%:*}; m=${arm##*:}
    COHORT_MTP_ALLOW_INEXACT=1 timeout ${ARM_LIMIT:-120} $B generate -m $M -i /tmp/ho.jsonl --scheduler $s --generation-mode $m \
      > /tmp/o.jsonl 2>/tmp/e.txt || tail -3 /tmp/e.txt
    cp /tmp/o.jsonl $OUT/$s-$m-r$round.jsonl
    summ /tmp/o.jsonl "$s-$m-r$round"
  done
done
