#!/usr/bin/env python3
"""Totals over `cohort generate` result files: drafts accepted/rejected, acceptance, tokens per
verify cycle, and decode tokens/s (decode tokens after each request's first / decode seconds).
Usage: summarize_generate.py OUT.jsonl [...]"""
import json
import sys

for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path) if l.strip()]
    s = [r["stats"] for r in rows]
    acc = sum(x["accepted_drafts"] for x in s)
    rej = sum(x["rejected_drafts"] for x in s)
    cyc = sum(x["verify_cycles"] for x in s)
    toks = sum(x["completion_tokens"] for x in s)
    dec_s = sum(x["decode_s"] for x in s)
    dec_toks = sum(max(x["completion_tokens"] - 1, 0) for x in s)
    errors = sum(1 for r in rows if r["finish_reason"] == "error")
    line = {
        "file": path,
        "requests": len(rows),
        "errors": errors,
        "completion_tokens": toks,
        "route": sorted({x["route"] for x in s}),
        "acceptance": round(acc / (acc + rej), 4) if acc + rej else None,
        "tokens_per_cycle": round((2 * acc + rej) / cyc, 4) if cyc else None,
        "decode_tok_s": round(dec_toks / dec_s, 2) if dec_s else None,
    }
    print(json.dumps(line))
