#!/usr/bin/env python3
"""The CPU weight routes side by side in one run (ABBA): cohort's CPU kernel on the quantized
codes against the float32 copy on OpenBLAS, B1 and one B8 cohort, plain decoding and MTP.

usage: scripts/bench_cpu_kernel.py [--model DIR] [--rounds R] [--gen N] [--alt-binary PATH] ARM [ARM ...]
  ARM = [alt/]ROUTE:SCHED:MODE (alt/: run --alt-binary, e.g. a build of another commit)
    ROUTE  kernel (--weights kernel, what `auto` picks on an AVX2 CPU)
           | kernel-mlx-layers (the same with COHORT_HOST_LAYERS=0: each layer's norms, residual
             adds and KV writes as MLX ops between the host pieces, the route before the host
             decode path)
           | kernel-mlx-sdpa (the same with COHORT_HOST_ATTENTION=0: MLX's SDPA for short blocks)
           | f32 (--weights dequantize)
           | f32-mlx-rope (--weights dequantize, COHORT_HOST_ROPE=0 COHORT_HOST_ATTENTION=0: the
             CPU route before the kernel)
    SCHED  b1 (6 chat questions one after another) | b8 (8 chat questions as one cohort)
           | p300 (4 prompts of 292-351 tokens cut from README.md, one token each: the prefill
             figure; "decode" then reports the median prefill tok/s)
           | c<N> (one prompt of N token ids, the same fixed pseudo-random ones every run, then
             --gen tokens: prompt reading and decoding at a context of N, issue 55)
           | c<N>x8 (8 such prompts, other ids each, as one sealed cohort)
    MODE   ar | mtp
Prints per arm and round: decode tok/s (B1: median of the rows; B8: tokens after each row's first
/ the longest row's decode time), B1 prefill tok/s, acceptance, the route; then medians. Every
arm of one mode must start each answer the same way (checked).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUESTIONS = [
    "Explain how photosynthesis works.", "Write a short poem about the sea.",
    "What are the benefits of exercise?", "Describe the water cycle.", "How do vaccines work?",
    "Give three tips for learning a language.", "What is machine learning?",
    "Summarize the plot of Romeo and Juliet.",
]

ROUTES = {
    "kernel": ("kernel", {}),
    "kernel-mlx-layers": ("kernel", {"COHORT_HOST_LAYERS": "0"}),
    "kernel-mlx-sdpa": ("kernel", {"COHORT_HOST_ATTENTION": "0"}),
    "f32": ("dequantize", {}),
    "f32-mlx-rope": ("dequantize", {"COHORT_HOST_ROPE": "0", "COHORT_HOST_ATTENTION": "0"}),
}


def context_ids(n, salt):
    """n token ids spread over the default model's vocabulary, fixed for (n, salt)."""
    return [(i * 7919 + salt * 104729 + 13) % 40000 + 100 for i in range(n)]


def context_sched(sched):
    """(prompt tokens, rows) of a c<N> or c<N>x8 schedule, else None."""
    if not sched.startswith("c"):
        return None
    n, _, rows = sched[1:].partition("x")
    return int(n), int(rows or 1)


def requests(sched, gen):
    if context_sched(sched):
        n, rows = context_sched(sched)
        warm = [{"id": f"w{i}", "prompt_ids": context_ids(16, i), "max_tokens": 4, "temperature": 0}
                for i in range(rows)]
        return warm + [{"id": f"q{i}", "prompt_ids": context_ids(n, i), "max_tokens": gen, "temperature": 0,
                        "ignore_eos": True} for i in range(rows)]
    if sched == "p300":
        words = open(os.path.join(ROOT, "README.md")).read().split()
        return [{"id": "w", "prompt": "Hi", "chat": True, "max_tokens": 2, "temperature": 0}] + [
            {"id": f"q{i}", "prompt": " ".join(words[9 * i:9 * i + 160]), "max_tokens": 1, "temperature": 0}
            for i in range(4)]
    n = 6 if sched == "b1" else 8
    warm = [{"id": f"w{i}", "prompt": "Hi", "chat": True, "max_tokens": 4, "temperature": 0}
            for i in range(1 if sched == "b1" else 8)]
    asks = [{"id": f"q{i}", "prompt": q, "chat": True, "max_tokens": gen, "temperature": 0, "ignore_eos": True}
            for i, q in enumerate(QUESTIONS[:n])]
    return warm + asks


def run_arm(args, files, arm):
    binary = args.binary
    if arm.startswith("alt/"):
        if not args.alt_binary:
            sys.exit(f"{arm} needs --alt-binary")
        binary = args.alt_binary
    route, sched, mode = arm.removeprefix("alt/").split(":")
    if route not in ROUTES:
        sys.exit(f"unknown route {route!r} (one of {', '.join(ROUTES)})")
    weights, switches = ROUTES[route]
    env = dict(os.environ, **switches)
    wide = sched == "b8" or (context_sched(sched) or (0, 1))[1] > 1
    cmd = [binary, "generate", "-i", files[sched], "--weights", weights, "--generation-mode", mode,
           "--scheduler", "cohort" if wide else "serial"]
    if context_sched(sched) and wide:
        # Long prompts: a continuous lane starts each row as its read ends; a sealed cohort
        # reads all eight, then decodes them together at width 8.
        cmd += ["--preset", "sealed"]
    if args.model:
        cmd += ["-m", args.model]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    # Sorted by id: a cohort's rows finish (and print) in an order that changes from run to run.
    rows = sorted((r for r in (json.loads(x) for x in out.splitlines() if x.startswith("{")) if r["id"].startswith("q")),
                  key=lambda r: r["id"])
    stats = [r["stats"] for r in rows]
    if sched == "p300":
        prefill = statistics.median(s["prefill_tok_s"] for s in stats)
        return {"decode": prefill, "prefill": prefill, "acceptance": 0.0, "route": f"{len(rows)} prompts",
                "starts": [r["token_ids"][:1] for r in rows]}
    if wide:
        if {s["real_width"] for s in stats} != {8} or any("serial" in s["route"] for s in stats):
            sys.exit(f"{arm} did not run as one cohort of 8 ({ {s['route'] for s in stats} })")
        decode = sum(len(r["token_ids"]) - 1 for r in rows) / max(s["decode_s"] for s in stats)
    else:
        decode = statistics.median(s["decode_tok_s"] for s in stats)
    prefill = statistics.median(s["prefill_tok_s"] for s in stats)
    acc = sum(s["accepted_drafts"] for s in stats)
    rej = sum(s["rejected_drafts"] for s in stats)
    return {"decode": decode, "prefill": prefill, "acceptance": acc / (acc + rej) if acc + rej else 0.0,
            "route": stats[0]["route"], "starts": [r["token_ids"][:16] for r in rows]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="model directory (default: cohort's default model)")
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=1, help="ABBA rounds (each runs every arm twice)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/cohort"))
    ap.add_argument("--alt-binary", help="the binary arms prefixed alt/ run")
    ap.add_argument("arms", nargs="+")
    args = ap.parse_args()
    files = {}
    for sched in sorted({"b1", "b8", "p300"} | {a.removeprefix("alt/").split(":")[1] for a in args.arms}):
        with tempfile.NamedTemporaryFile("w", suffix=f"-{sched}.jsonl", delete=False) as f:
            f.write("".join(json.dumps(r) + "\n" for r in requests(sched, args.gen)))
            files[sched] = f.name
    results = {a: [] for a in args.arms}
    starts = {}
    for rnd in range(args.rounds):
        for arm in args.arms + args.arms[::-1]:
            r = run_arm(args, files, arm)
            results[arm].append(r)
            key = tuple(arm.split(":")[1:])
            starts.setdefault(key, (arm, r["starts"]))
            if r["starts"] != starts[key][1]:
                print(f"note: {arm} starts its answers differently from {starts[key][0]}")
            print(f"round {rnd + 1} {arm:24} decode {r['decode']:7.2f} tok/s  prefill {r['prefill']:7.1f} tok/s  "
                  f"acceptance {r['acceptance']:.3f}  {r['route']}", flush=True)
    print("\narm | decode tok/s (each run) | median | B1 prefill tok/s (median) | acceptance")
    for arm, rs in results.items():
        d = [x["decode"] for x in rs]
        print(f"{arm} | {', '.join(f'{x:.1f}' for x in d)} | {statistics.median(d):.1f} | "
              f"{statistics.median(x['prefill'] for x in rs):.0f} | {rs[0]['acceptance']:.3f}")


if __name__ == "__main__":
    main()
