#!/usr/bin/env python3
"""How prompt reading and decoding hold up as the context grows (issue 55): bench.py's
comparison (the same GGUF, the same prompts, ABBA rounds, fresh processes) once per prompt
length, then one table of every length side by side.

usage (normally through scripts/peers/run.sh ctx, which sets up the peers):
  ctx_sweep.py --model DIR --gguf FILE [--lens 300,2000,4000] [--arms "llama.cpp Q4_1,cohort AR"]
               [--rounds 1] [--gen 64] [--text docs/architecture.md] [--b1-only]

cohort's B8 run is a sealed cohort (`--preset sealed`): a continuous lane would start each row
decoding as its long read ends, so the eight would not decode together at width 8.

Each length's own table and receipt are in <out>/<length>/ (bench.py's); <out>/table.md holds the
sweep: per length and arm the B1 prompt read, B1 decode and B8 decode rates (medians, min-max),
and cohort's ratio to llama.cpp on each.
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

COLUMNS = [("b1_prompt_tok_s", "B1 prompt tok/s"), ("b1_decode_tok_s", "B1 decode tok/s"),
           ("b8_decode_tok_s", "B8 decode tok/s")]
PEER = "llama.cpp Q4_1"


def cell(summary, arm, key):
    m = summary.get(arm, {}).get(key)
    if not m:
        return "not run" if key.startswith("b8") and summary.get(arm, {}).get("b1_decode_tok_s") else "failed"
    spread = f" ({m['min']:.1f}-{m['max']:.1f})" if len(m["values"]) > 1 else ""
    return f"{m['median']:.1f}{spread}"


def table(receipts, arms):
    first = receipts[0][1]
    lines = [f"SmolLM2-135M-Instruct on the CPU ({first['machine']['cpu']}, {first['machine']['nproc']} cores), "
             f"{first['config']['gen']} tokens generated (greedy, EOS ignored), {first['config']['rounds']} "
             f"round(s) ABBA per length, medians (min-max); commit {first['commit']['head'][:7]}"
             + (" (plus uncommitted changes)" if first["commit"]["dirty"] else "") + ".", "",
             "| prompt tokens | arm | " + " | ".join(t for _, t in COLUMNS) + " |",
             "| --- | --- |" + " --- |" * len(COLUMNS)]
    for length, receipt in receipts:
        s = receipt["summary"]
        for arm in arms:
            lines.append(f"| {length} | {arm} | " + " | ".join(cell(s, arm, k) for k, _ in COLUMNS) + " |")
        for arm in arms:
            if arm == PEER or PEER not in arms:
                continue
            ratios = []
            for key, _ in COLUMNS:
                a, b = s.get(arm, {}).get(key), s.get(PEER, {}).get(key)
                ratios.append(f"{a['median'] / b['median']:.2f}x" if a and b and b["median"] else "-")
            lines.append(f"| {length} | {arm} / {PEER} | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--root", default=root)
    ap.add_argument("--peers", default=os.path.join(root, ".runtime/peers"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--lens", default="300,2000,4000", help="prompt lengths, comma-separated")
    ap.add_argument("--arms", default=f"{PEER},cohort AR")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--text", default=os.path.join(root, "docs/architecture.md"),
                    help="where the prompts' excerpts come from (long enough for 8 of the longest)")
    ap.add_argument("--b1-only", action="store_true", help="one row only (bench.py's --b1-only)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    lens = [int(x) for x in args.lens.split(",") if x.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out = os.path.abspath(args.out or os.path.join(args.peers, "ctx-results",
                                                   datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    receipts, status = [], 0
    for length in lens:
        bench.say(f"prompt length {length}")
        sub = os.path.join(out, str(length))
        status |= bench.main(["--root", args.root, "--peers", args.peers, "--model", args.model, "--gguf", args.gguf,
                              "--prompt-len", str(length), "--arms", ",".join(arms), "--rounds", str(args.rounds),
                              "--gen", str(args.gen), "--text", args.text, "--out", sub, "--b8-preset", "sealed"] + (["--b1-only"] if args.b1_only else []))
        receipts.append((length, json.load(open(os.path.join(sub, "receipt.json")))))
    text = table(receipts, arms)
    open(os.path.join(out, "table.md"), "w").write(text)
    print(text)
    bench.say(f"sweep: {out}/table.md")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
