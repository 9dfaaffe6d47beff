#!/usr/bin/env python3
"""cohort against mlx-lm on the same checkpoint, same prompt, same machine, interleaved (ABBA).

B1 decode and prefill tokens/s: mlx-lm in this process (float32 activations, as cohort uses on
the CPU), cohort through `cohort generate` (its own reported prefill/decode figures, which exclude
process start and model load). Also cohort's B1 MTP route when the model has MTP weights. With
`--batch 8`, eight different prompts also go through mlx-lm's BatchGenerator and through one
cohort (`--scheduler cohort`): aggregate decode tokens/s (generated tokens after each row's
first / decode time; for cohort the longest row's).

usage: scripts/bench_vs_mlx_lm.py --model DIR [--prompt-len 300] [--gen 128] [--rounds 3] [--keep-dtype] [--batch 8]
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


def spread(xs, fmt):
    """'median (min-max)' of `xs`."""
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def mlx_lm_batch(model, prompts, gen):
    """Aggregate decode tok/s of mlx-lm's BatchGenerator over `prompts` (no stop tokens)."""
    from mlx_lm.generate import BatchGenerator

    bg = BatchGenerator(model, max_tokens=gen, stop_tokens=None,
                        prefill_batch_size=len(prompts), completion_batch_size=len(prompts))
    with bg.stats() as st:
        bg.insert(prompts, [gen] * len(prompts))
        while bg.next_generated():
            pass
    bg.close()
    return st.generation_tokens / st.decode_time


def cohort_batch(binary, model_dir, prompts, gen, mode):
    """Aggregate decode tok/s of one cohort of `prompts`, after a warm-up cohort; acceptance."""
    reqs = [{"id": f"w{i}", "prompt_ids": p[:16], "max_tokens": 4, "temperature": 0} for i, p in enumerate(prompts)]
    reqs += [{"id": f"b{i}", "prompt_ids": p, "max_tokens": gen, "temperature": 0, "ignore_eos": True}
             for i, p in enumerate(prompts)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
        path = f.name
    out = subprocess.run([binary, "generate", "-m", model_dir, "-i", path, "--generation-mode", mode, "--scheduler", "cohort"],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    rows = [json.loads(x) for x in out.strip().splitlines()][len(prompts):]
    assert {r["stats"]["real_width"] for r in rows} == {len(prompts)}, "the measured prompts did not run as one cohort"
    route = rows[0]["stats"]["route"]
    if "serial" in route:
        # The construction check refused the batched route: rows ran one after another, so the
        # longest row's decode time is not the batch's.
        return None
    decode = max(r["stats"]["decode_s"] for r in rows)
    acc = sum(r["stats"]["accepted_drafts"] for r in rows)
    rej = sum(r["stats"]["rejected_drafts"] for r in rows)
    return sum(len(r["token_ids"]) - 1 for r in rows) / decode, acc / (acc + rej) if acc + rej else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=300)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/cohort"))
    ap.add_argument("--keep-dtype", action="store_true",
                    help="run mlx-lm in the checkpoint's own dtype (as cohort serves on a GPU) instead of float32")
    ap.add_argument("--batch", type=int, default=0, help="also compare batched generation of this many prompts")
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
    if args.batch:
        batch_arms(args, model, vocab, has_mtp)
    print(f"model {args.model}, prompt {args.prompt_len} tokens, {args.gen} generated, {args.rounds} rounds (ABBA), medians (min-max)")
    print("| arm | prefill tok/s | decode tok/s | acceptance |")
    print("| --- | --- | --- | --- |")
    med = {}
    for name, runs in arms.items():
        med[name] = (statistics.median(x[0] for x in runs), statistics.median(x[1] for x in runs))
        cells = [spread([x[0] for x in runs], ".0f"), spread([x[1] for x in runs], ".1f"), f"{statistics.median(x[2] for x in runs):.2f}"]
        print(f"| {name} | {' | '.join(cells)} |")
    a, b = med["cohort B1 AR"], med["mlx-lm B1 AR"]
    print(f"cohort/mlx-lm: prefill {a[0] / b[0]:.2f}x, B1 AR decode {a[1] / b[1]:.2f}x")
    if has_mtp:
        m = med["cohort B1 MTP"]
        print(f"cohort B1 MTP / B1 AR decode: {m[1] / a[1]:.2f}x")


def batch_arms(args, model, vocab, has_mtp):
    prompts = [[(7 * i + 3 + 11 * b) % min(vocab, 500) for i in range(args.prompt_len)] for b in range(args.batch)]
    arms = {f"mlx-lm B{args.batch} AR": [], f"cohort B{args.batch} AR": []}
    if has_mtp:
        arms[f"cohort B{args.batch} MTP"] = []
    mlx_lm_batch(model, [p[:16] for p in prompts], 4)  # warm-up
    for r in range(args.rounds):
        for arm in (["mlx", "cohort"] if r % 2 == 0 else ["cohort", "mlx"]):
            if arm == "mlx":
                arms[f"mlx-lm B{args.batch} AR"].append((mlx_lm_batch(model, prompts, args.gen), 0.0))
            else:
                arms[f"cohort B{args.batch} AR"].append(cohort_batch(args.binary, args.model, prompts, args.gen, "ar"))
                if f"cohort B{args.batch} MTP" in arms:
                    got = cohort_batch(args.binary, args.model, prompts, args.gen, "mtp")
                    if got is None:
                        print(f"cohort B{args.batch} MTP ran as serial B1 runs (construction check): arm dropped")
                        del arms[f"cohort B{args.batch} MTP"]
                    else:
                        arms[f"cohort B{args.batch} MTP"].append(got)
    print(f"{args.batch} prompts of {args.prompt_len} tokens, {args.gen} generated each, {args.rounds} rounds (ABBA)")
    print("| arm | aggregate decode tok/s, median (min-max) | acceptance |")
    print("| --- | --- | --- |")
    med = {}
    for name, runs in arms.items():
        med[name] = statistics.median(x[0] for x in runs)
        print(f"| {name} | {spread([x[0] for x in runs], '.0f')} | {statistics.median(x[1] for x in runs):.2f} |")
    base = med[f"mlx-lm B{args.batch} AR"]
    for name in arms:
        if name.startswith("cohort"):
            print(f"{name} / mlx-lm B{args.batch} AR: {med[name] / base:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
