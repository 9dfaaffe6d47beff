"""Totals of one `cohort generate` result file (the first row, a warm-up, left out): route, median
row decode tok/s, aggregate tok/s over the longest row's decode time, acceptance, real widths."""
import json
import statistics as st
import sys

path, label = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(path) if l.startswith("{")][1:]
if not rows:
    print(label, "no rows")
    sys.exit(0)
s = [r["stats"] for r in rows]
acc = sum(x.get("accepted_drafts", 0) for x in s)
rej = sum(x.get("rejected_drafts", 0) for x in s)
tokens = sum(len(r["token_ids"]) - 1 for r in rows)
print(
    label,
    s[0].get("route"),
    "median row decode tok/s",
    round(st.median(x["decode_tok_s"] for x in s), 1),
    "aggregate",
    round(tokens / max(x["decode_s"] for x in s), 1),
    "acceptance",
    round(acc / (acc + rej), 3) if acc + rej else None,
    "widths",
    sorted({x.get("real_width") for x in s}, key=str),
)
