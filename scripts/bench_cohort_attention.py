#!/usr/bin/env python3
"""One B8 cohort on the CPU, arms side by side in one run (ABBA): batched cohort attention against
the per-row chain (`COHORT_BATCHED_ATTENTION=0`), optionally against another cohort binary, AR or MTP.

usage: scripts/bench_cohort_attention.py --model DIR --prompts PROMPTS.json ARM [ARM ...]
  ARM = NAME:MODE, NAME one of batched | rows | old (the binary given by --old), MODE ar | mtp
  PROMPTS.json: a list of 8 token-id lists (scripts/peers/run.sh writes one per run)
Prints each arm's aggregate decode tok/s per round (generated tokens after each row's first /
the longest row's decode time) and checks every arm of one mode starts each row the same way.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def request(rid, ids, gen):
    return {"id": rid, "prompt_ids": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True}


def run_arm(args, path, name, mode):
    binary = args.old if name == "old" else args.binary
    env = dict(os.environ, COHORT_BATCHED_ATTENTION="0" if name == "rows" else "1")
    cmd = [binary, "generate", "-m", args.model, "-i", path, "--scheduler", "cohort", "--generation-mode", mode]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")][8:]
    routes = {r["stats"]["route"] for r in rows}
    if {r["stats"]["real_width"] for r in rows} != {8} or any("serial" in x for x in routes):
        sys.exit(f"{name}:{mode} did not run as one cohort of 8 ({routes})")
    decode = max(r["stats"]["decode_s"] for r in rows)
    acc = sum(r["stats"]["accepted_drafts"] for r in rows)
    rej = sum(r["stats"]["rejected_drafts"] for r in rows)
    return sum(len(r["token_ids"]) - 1 for r in rows) / decode, acc / (acc + rej) if acc + rej else 0.0, \
        [r["token_ids"][:12] for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1, help="ABBA rounds (each runs every arm twice)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/cohort"))
    ap.add_argument("--old", help="another cohort binary for the arm named old")
    ap.add_argument("arms", nargs="+")
    args = ap.parse_args()
    prompts = json.load(open(args.prompts))[:8]
    reqs = [request(f"w{i}", p[:32], 8) for i, p in enumerate(prompts)]  # a warm-up cohort first
    reqs += [request(f"m{i}", p, args.gen) for i, p in enumerate(prompts)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
    results = {a: [] for a in args.arms}
    starts = {}
    for _ in range(args.rounds):
        for arm in args.arms + args.arms[::-1]:
            name, mode = arm.split(":")
            tps, acc, first = run_arm(args, f.name, name, mode)
            results[arm].append(tps)
            starts.setdefault(mode, {})[arm] = first
            print(f"{arm}: {tps:.1f} tok/s, acceptance {acc:.3f}", flush=True)
    os.unlink(f.name)
    for arm, xs in results.items():
        print(f"| {arm} | {', '.join(f'{x:.1f}' for x in xs)} |")
    for mode, by_arm in starts.items():
        same = len({json.dumps(v) for v in by_arm.values()}) == 1
        print(f"{mode}: every arm starts every row with the same 12 tokens: {same}")


if __name__ == "__main__":
    main()
