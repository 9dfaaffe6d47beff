#!/bin/bash
# MTP on the GPU on 8 chat prompts: B1 AR, B1 MTP and one B8 MTP cohort (acceptance, route, decode).
set -u
. scripts/gpu/env.sh
M=/tmp/x/smol
python3 - > /tmp/mtp.jsonl <<'PY'
import json
qs = ["Explain how photosynthesis works.", "Write a short poem about the sea.", "What are the benefits of exercise?",
      "Describe the water cycle.", "How do vaccines work?", "Give three tips for learning a language.",
      "What is machine learning?", "Summarize the plot of Romeo and Juliet."]
print(json.dumps({"id": "warm", "prompt": "Hello", "chat": True, "max_tokens": 8, "temperature": 0}))
for i, q in enumerate(qs):
    print(json.dumps({"id": f"q{i}", "prompt": q, "chat": True, "max_tokens": 128, "temperature": 0, "ignore_eos": True}))
PY
head -2 /tmp/mtp.jsonl > /tmp/one.jsonl
summ() { python3 -c "
import json,sys
rows=[json.loads(l) for l in open('$1') if l.startswith('{')][1:]
for r in rows[:3]: s=r['stats']; print(r['id'], s['route'], 'decode', round(s['decode_tok_s'],1), 'acc', s.get('acceptance_rate'), 'width', s.get('real_width'))
"; }
for cache in 400; do
  for mode in ar mtp; do
    MLX_CUDA_GRAPH_CACHE_SIZE=$cache COHORT_MTP_ALLOW_INEXACT=1 timeout 120 $B generate -m $M -i /tmp/one.jsonl --scheduler serial --generation-mode $mode > /tmp/o.jsonl 2>/tmp/e.txt
    echo "== B1 $mode cache $cache"; summ /tmp/o.jsonl; grep -v TMA /tmp/e.txt | tail -2
  done
  MLX_CUDA_GRAPH_CACHE_SIZE=$cache COHORT_MTP_ALLOW_INEXACT=1 timeout 120 $B generate -m $M -i /tmp/mtp.jsonl --scheduler cohort --generation-mode mtp > /tmp/o.jsonl 2>/tmp/e.txt
  echo "== B8 mtp cache $cache"; summ /tmp/o.jsonl; grep -v TMA /tmp/e.txt | tail -2
done
