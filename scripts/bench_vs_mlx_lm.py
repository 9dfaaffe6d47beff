#!/usr/bin/env python3
"""cohort against mlx-lm on the same checkpoint, same prompt, same machine, interleaved (ABBA).

B1 decode and prefill tokens/s: mlx-lm in this process (float32 activations, as cohort uses on
the CPU), cohort through `cohort generate` (its own reported prefill/decode figures, which exclude
process start and model load). Also cohort's B1 MTP route when the model has MTP weights.

usage: scripts/bench_vs_mlx_lm.py --model DIR [--prompt-len 300] [--gen 128] [--rounds 3] [--keep-dtype]
needs: mlx-lm 0.32.2 (e.g. the venv tests/fixtures/README.md describes) and a built cohort.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm import load
from mlx_lm.generate import generate_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cast_f32(model):
    new = [(k, v.astype(mx.float32)) for k, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)]
    model.update(tree_unflatten(new))
    mx.eval(model.parameters())


def mlx_lm_run(model, prompt, gen):
    """(prefill tok/s, decode tok/s) with mlx-lm's own generate_step, greedy."""
    t0 = time.perf_counter()
    steps = generate_step(mx.array(prompt), model, max_tokens=gen, sampler=lambda x: mx.argmax(x, axis=-1))
    first, _ = next(steps)
    t1 = time.perf_counter()
    n = 1
    for _tok, _ in steps:
        n += 1
    t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), (n - 1) / (t2 - t1)


def cohort_run(binary, model_dir, prompt, gen, mode):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        # A short warm-up request first, as mlx-lm gets one in this process.
        f.write(json.dumps({"id": "warm", "prompt_ids": prompt[:16], "max_tokens": 4, "temperature": 0}) + "\n")
        f.write(json.dumps({"id": "b", "prompt_ids": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True}) + "\n")
        path = f.name
    out = subprocess.run([binary, "generate", "-m", model_dir, "-i", path, "--generation-mode", mode, "--scheduler", "serial"],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    r = json.loads(out.strip().splitlines()[-1])
    s = r["stats"]
    return s["prefill_tok_s"], s["decode_tok_s"], s.get("acceptance_rate", 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=300)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/cohort"))
    ap.add_argument("--keep-dtype", action="store_true",
                    help="run mlx-lm in the checkpoint's own dtype (as cohort serves on a GPU) instead of float32")
    args = ap.parse_args()

    model, tok = load(args.model)
    if not args.keep_dtype:
        cast_f32(model)
    has_mtp = os.path.exists(os.path.join(args.model, "mtp.safetensors"))
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    vocab = cfg.get("text_config", cfg)["vocab_size"]
    prompt = [(7 * i + 3) % min(vocab, 500) for i in range(args.prompt_len)]
    arms = {"mlx-lm B1 AR": [], "cohort B1 AR": []}
    if has_mtp:
        arms["cohort B1 MTP"] = []
    mlx_lm_run(model, prompt[:16], 4)  # warm-up
    for r in range(args.rounds):
        order = ["mlx", "cohort"] if r % 2 == 0 else ["cohort", "mlx"]  # ABBA
        for arm in order:
            if arm == "mlx":
                arms["mlx-lm B1 AR"].append(mlx_lm_run(model, prompt, args.gen) + (0.0,))
            else:
                arms["cohort B1 AR"].append(cohort_run(args.binary, args.model, prompt, args.gen, "ar"))
                if has_mtp:
                    arms["cohort B1 MTP"].append(cohort_run(args.binary, args.model, prompt, args.gen, "mtp"))
    print(f"model {args.model}, prompt {args.prompt_len} tokens, {args.gen} generated, {args.rounds} rounds (ABBA), medians (min-max)")
    print("| arm | prefill tok/s | decode tok/s | acceptance |")
    print("| --- | --- | --- | --- |")
    med = {}
    for name, runs in arms.items():
        pf = [x[0] for x in runs]
        dc = [x[1] for x in runs]
        med[name] = (statistics.median(pf), statistics.median(dc))
        acc = statistics.median([x[2] for x in runs])
        print(f"| {name} | {med[name][0]:.0f} ({min(pf):.0f}-{max(pf):.0f}) | {med[name][1]:.1f} ({min(dc):.1f}-{max(dc):.1f}) | {acc:.2f} |")
    a, b = med["cohort B1 AR"], med["mlx-lm B1 AR"]
    print(f"cohort/mlx-lm: prefill {a[0] / b[0]:.2f}x, B1 AR decode {a[1] / b[1]:.2f}x")
    if has_mtp:
        m = med["cohort B1 MTP"]
        print(f"cohort B1 MTP / B1 AR decode: {m[1] / a[1]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
