#!/usr/bin/env python3
"""The CPU peer comparison (issue #10): cohort against mlx-lm and llama.cpp, one checkpoint.

Every arm serves SmolLM2-135M-Instruct on the CPU with the same prompts (token ids built once
here), greedy, a fixed number of generated tokens (EOS ignored), so every arm does the same work:

  mlx-lm 4-bit      the MLX import as mlx-lm loads it (4-bit affine body, 8-bit embedding), its
                    float parameters cast to float32 so activations are float32 as in cohort
  mlx-lm f32        the same, every quantized layer dequantized to float32 (what cohort's
                    default CPU weight policy does at load)
  llama.cpp Q4_1    the GGUF itself, through llama.cpp's own llama-batched-bench
  cohort AR / MTP   `cohort generate`, plain decoding (--generation-mode ar) and the default mode
                    with the shipped MTP head beside the model

Per arm: B1 prompt tok/s, time to first token and decode tok/s on prompt 0, and an aggregate
over 8 requests decoded together (B8). One run, rounds of all arms, the arm order reversed every
other round (ABBA), each arm a fresh process per round; medians with min-max spread.

usage (normally through scripts/peers/run.sh, which sets up the peers):
  bench.py --model DIR --gguf FILE [--rounds 3] [--prompt-len 300] [--gen 128] [--threads 2]
  bench.py render RECEIPT   rewrite the table beside a receipt (after a change to the table's form)
  bench.py mlx-worker ...   (internal: one mlx-lm arm run, JSON on stdout)
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ARMS = ["mlx-lm 4-bit", "mlx-lm f32", "llama.cpp Q4_1", "cohort AR", "cohort MTP"]
PEERS = ["mlx-lm 4-bit", "mlx-lm f32", "llama.cpp Q4_1"]
COHORTS = ["cohort AR", "cohort MTP"]
# (key, column title, format); the keys are what every arm run reports.
METRICS = [
    ("b1_prompt_tok_s", "B1 prompt tok/s", "{:.0f}"),
    ("b1_ttft_s", "B1 TTFT s (lower is better)", "{:.3f}"),
    ("b1_decode_tok_s", "B1 decode tok/s", "{:.1f}"),
    ("b8_e2e_tok_s", "B8 aggregate tok/s (end to end)", "{:.1f}"),
    ("b8_decode_tok_s", "B8 decode tok/s", "{:.1f}"),
]
INSTRUCTION = "Summarize the following excerpt from a software project's README in a few sentences."
WARM_PROMPT = 16  # warm-up prompt tokens
WARM_GEN = 4  # warm-up generated tokens


# ---------------------------------------------------------------- prompts


def chat_frame(tokenizer):
    """The token ids before and after the user's text in the model's chat template.

    Splitting the rendered template at a placeholder lets every prompt be cut to an exact length
    while keeping the template's head and tail intact."""
    mark = "\u0000PASSAGE\u0000"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": INSTRUCTION + "\n\n" + mark}], tokenize=False, add_generation_prompt=True
    )
    head, tail = text.split(mark)
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    return enc(head), enc(tail)


def passage_starts(tok, ids, room, n):
    """n window starts spread evenly over the text's tokens, each moved to just after a line
    break (when one is near) so excerpts begin cleanly; every window holds `room` tokens."""
    last = len(ids) - room
    starts = []
    for i in range(n):
        at = last * i // max(n - 1, 1)
        nl = next((j + 1 for j in range(at, min(at + 64, last)) if "\n" in tok.decode(ids[j])), at)
        starts.append(0 if i == 0 else nl)
    return starts


def build_prompts(model_dir, text_file, length, n=8):
    """n chat prompts of exactly `length` tokens: the template around excerpts of text_file."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    head, tail = chat_frame(tok)
    room = length - len(head) - len(tail)
    if room < 8:
        sys.exit(f"--prompt-len {length} leaves no room for text in the chat frame ({len(head) + len(tail)} tokens)")
    ids = tok.encode(open(text_file, encoding="utf-8").read(), add_special_tokens=False)
    if len(ids) < room + n:
        sys.exit(f"{text_file} is too short for {n} excerpts of {room} tokens")
    prompts = [head + ids[s:s + room] + tail for s in passage_starts(tok, ids, room, n)]
    return prompts


# ---------------------------------------------------------------- mlx-lm (worker process)


def mlx_load(model_dir, weights):
    """The model as mlx-lm loads it; `f32` dequantizes every quantized layer first. Either way
    the float parameters become float32, so activations run in float32 as in cohort on the CPU."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm import load
    from mlx_lm.utils import dequantize_model

    model, _ = load(model_dir)
    if weights == "f32":
        model = dequantize_model(model)
    floats = [(k, v.astype(mx.float32)) for k, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)]
    model.update(tree_unflatten(floats))
    mx.eval(model.parameters())
    dtypes = sorted({str(v.dtype) for _, v in tree_flatten(model.parameters())})
    return model, dtypes


def mlx_b1(model, prompt, gen):
    """B1 with mlx-lm's generate_step (greedy; it has no EOS stop): TTFT, prompt and decode rates."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    t0 = time.perf_counter()
    steps = generate_step(mx.array(prompt), model, max_tokens=gen, sampler=lambda x: mx.argmax(x, axis=-1))
    next(steps)
    t1 = time.perf_counter()
    n = 1 + sum(1 for _ in steps)
    t2 = time.perf_counter()
    return {
        "b1_prompt_tok_s": len(prompt) / (t1 - t0),
        "b1_ttft_s": t1 - t0,
        "b1_decode_tok_s": (n - 1) / (t2 - t1),
        "b1_generated": n,
    }


def mlx_b8(model, prompts, gen):
    """The 8 prompts through mlx-lm's BatchGenerator at once, no stop tokens: wall from insert to
    the last token, and mlx-lm's own decode-time split."""
    from mlx_lm.generate import BatchGenerator

    bg = BatchGenerator(model, max_tokens=gen, stop_tokens=None,
                        prefill_batch_size=len(prompts), completion_batch_size=len(prompts))
    counts = {}
    t0 = time.perf_counter()
    with bg.stats() as st:
        bg.insert(prompts, [gen] * len(prompts))
        while responses := bg.next_generated():
            for r in responses:
                counts[r.uid] = counts.get(r.uid, 0) + 1
    wall = time.perf_counter() - t0
    bg.close()
    total = sum(counts.values())
    return {
        "b8_e2e_tok_s": total / wall,
        "b8_decode_tok_s": st.generation_tokens / st.decode_time,
        "b8_prompt_tok_s": st.prompt_tokens / st.prompt_time if st.prompt_time else 0.0,
        "b8_wall_s": wall,
        "b8_generated": total,
        "b8_rows": len(counts),
    }


def mlx_blas():
    """Which BLAS the mlx-cpu wheel's libmlx.so loads (run.sh links OpenBLAS in)."""
    import glob

    import mlx.core as mx

    site = os.path.dirname(os.path.dirname(mx.__file__))
    libs = glob.glob(os.path.join(site, "mlx_cpu.libs", "libblas-*.so.*[0-9]"))
    return [os.path.realpath(x) for x in libs]


def mlx_worker(args):
    """One mlx-lm arm run (a process of its own, as every arm gets): B1 then B8, JSON out."""
    import mlx.core as mx
    import mlx_lm

    prompts = json.load(open(args.prompts))
    model, dtypes = mlx_load(args.model, args.weights)
    # Warm-ups as every arm gets one: first calls allocate and build graphs.
    mlx_b1(model, prompts[0][:WARM_PROMPT], WARM_GEN)
    mlx_b8(model, [p[:WARM_PROMPT] for p in prompts], WARM_GEN)
    out = mlx_b1(model, prompts[0], args.gen)
    out.update(mlx_b8(model, prompts, args.gen))
    out["info"] = {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "param_dtypes": dtypes,
                   "device": str(mx.default_device()), "blas": mlx_blas()}
    print(json.dumps(out))


# ---------------------------------------------------------------- arm runners (orchestrator)


def run_json_lines(cmd, timeout):
    """Run a command; its stdout's JSON lines, and its stderr for the receipt."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return lines, p.stderr


def arm_mlx(ctx, weights):
    cmd = [sys.executable, os.path.abspath(__file__), "mlx-worker", "--model", ctx.model,
           "--weights", weights, "--prompts", ctx.prompts_file, "--gen", str(ctx.gen)]
    lines, _ = run_json_lines(cmd, ctx.timeout)
    out = lines[-1]
    check(out["b1_generated"] == ctx.gen and out["b8_generated"] == 8 * ctx.gen and out["b8_rows"] == 8,
          f"mlx-lm {weights}: generated {out['b1_generated']} / {out['b8_generated']} tokens")
    return out, cmd


def arm_llama(ctx):
    """llama-batched-bench: one B1 and one B8 (separate prompts, not shared) pass over the
    prompt and generation lengths; it feeds random token ids and does not sample."""
    widths = [1, 8] if ctx.b8 else [1]
    n_ctx = max(widths) * (ctx.prompt_len + ctx.gen) + 64
    cmd = [ctx.llama_bench, "-m", ctx.gguf, "-c", str(n_ctx), "-b", str(n_ctx), "-ub", "512",
           "-npp", str(ctx.prompt_len), "-ntg", str(ctx.gen), "-npl", ",".join(map(str, widths)),
           "-t", str(ctx.threads), "-tb", str(ctx.threads), "--output-format", "jsonl"]
    lines, _ = run_json_lines(cmd, ctx.timeout)
    by = {x["pl"]: x for x in lines}
    check(set(by) == set(widths), f"llama-batched-bench printed widths {sorted(by)} instead of {widths}")
    b1 = by[1]
    out = {
        "b1_prompt_tok_s": b1["speed_pp"],
        "b1_ttft_s": b1["t_pp"],
        "b1_decode_tok_s": b1["speed_tg"],
        "raw": lines,
    }
    if ctx.b8:
        b8 = by[8]
        out.update({
            "b8_e2e_tok_s": 8 * ctx.gen / b8["t"],
            "b8_decode_tok_s": b8["speed_tg"],
            "b8_prompt_tok_s": b8["speed_pp"],
            "b8_wall_s": b8["t"],
        })
    return out, cmd


def request(rid, ids, gen):
    return {"id": rid, "prompt_ids": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True}


def cohort_generate(ctx, reqs, scheduler, mode, preset=None):
    """`cohort generate` on the requests; its result lines and the command."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
    cmd = [ctx.cohort, "generate", "-m", ctx.model, "-i", f.name, "--scheduler", scheduler]
    if mode:
        cmd += ["--generation-mode", mode]
    if preset:
        cmd += ["--preset", preset]
    try:
        lines, err = run_json_lines(cmd, ctx.timeout)
    finally:
        os.unlink(f.name)
    probe = [x for x in err.splitlines() if x.startswith("cohort:")]
    return lines, cmd, probe


def acceptance(rows):
    acc = sum(r["stats"]["accepted_drafts"] for r in rows)
    rej = sum(r["stats"]["rejected_drafts"] for r in rows)
    return acc / (acc + rej) if acc + rej else 0.0


def cohort_b1(ctx, mode):
    """Serial scheduler: a short warm-up request, then prompt 0. cohort's own figures (they
    exclude process start and model load); TTFT = queue wait + prefill (the first token is
    sampled at the end of the prefill)."""
    reqs = [request("warm", ctx.prompts[0][:WARM_PROMPT], WARM_GEN), request("b1", ctx.prompts[0], ctx.gen)]
    lines, cmd, probe = cohort_generate(ctx, reqs, "serial", mode)
    s = lines[-1]["stats"]
    check(len(lines[-1]["token_ids"]) == ctx.gen, f"cohort B1 generated {len(lines[-1]['token_ids'])} tokens")
    return {
        "b1_prompt_tok_s": s["prefill_tok_s"],
        "b1_ttft_s": s["queue_wait_s"] + s["prefill_s"],
        "b1_decode_tok_s": s["decode_tok_s"],
        "b1_route": s["route"],
        "b1_acceptance": s["acceptance_rate"],
    }, cmd, probe


def cohort_b8(ctx, mode):
    """Cohort scheduler: 8 short warm-up requests (one cohort), then the 8 prompts (the measured
    cohort). A cohort prefills its rows one after another, then decodes them together, so its
    wall time is the sum of the rows' prefill times plus the longest decode time."""
    warm = [request(f"warm{i}", p[:WARM_PROMPT], WARM_GEN) for i, p in enumerate(ctx.prompts)]
    meas = [request(f"b8-{i}", p, ctx.gen) for i, p in enumerate(ctx.prompts)]
    lines, cmd, probe = cohort_generate(ctx, warm + meas, "cohort", mode, ctx.b8_preset)
    rows = lines[len(warm):]
    widths = {r["stats"]["real_width"] for r in rows}
    check(widths == {8}, f"cohort B8: the measured requests ran at widths {sorted(widths)}, not as one cohort of 8")
    tokens = [len(r["token_ids"]) for r in rows]
    check(tokens == [ctx.gen] * 8, f"cohort B8 generated {tokens}")
    prefill = sum(r["stats"]["prefill_s"] for r in rows)
    decode = max(r["stats"]["decode_s"] for r in rows)
    return {
        "b8_e2e_tok_s": sum(tokens) / (prefill + decode),
        "b8_decode_tok_s": sum(t - 1 for t in tokens) / decode,
        "b8_prompt_tok_s": sum(r["stats"]["prompt_tokens"] for r in rows) / prefill,
        "b8_wall_s": prefill + decode,
        "b8_route": rows[0]["stats"]["route"],
        "b8_acceptance": acceptance(rows),
    }, cmd, probe


def arm_cohort(ctx, mode):
    b1, cmd1, probe = cohort_b1(ctx, mode)
    b1["probe"] = probe
    if not ctx.b8:
        return b1, [cmd1]
    b8, cmd8, _ = cohort_b8(ctx, mode)
    b1.update(b8)
    return b1, [cmd1, cmd8]


def check(ok, why):
    if not ok:
        raise RuntimeError(why)


def busy_cpu_s():
    """CPU seconds the whole machine has been busy (all processes), from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """CPU seconds used by this process and the arm processes it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_arm(ctx, arm):
    """One arm once, in fresh processes; the figures plus how busy the rest of the machine was
    meanwhile (the CPU share other processes took: the noise this run saw)."""
    runners = {
        "mlx-lm 4-bit": lambda: arm_mlx(ctx, "q4"),
        "mlx-lm f32": lambda: arm_mlx(ctx, "f32"),
        "llama.cpp Q4_1": lambda: arm_llama(ctx),
        "cohort AR": lambda: arm_cohort(ctx, "ar"),
        "cohort MTP": lambda: arm_cohort(ctx, None),  # the default mode: MTP when the head is there
    }
    load0, t0, busy0, own0 = os.getloadavg()[0], time.time(), busy_cpu_s(), own_cpu_s()
    try:
        figures, cmd = runners[arm]()
        figures["error"] = None
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
        figures, cmd = {"error": str(e)[-3000:]}, None
    wall = time.time() - t0
    others = max(0.0, (busy_cpu_s() - busy0) - (own_cpu_s() - own0))
    figures.update(arm=arm, command=cmd, load1_before=load0, load1_after=os.getloadavg()[0], wall_s=wall,
                   others_cpu_share=others / (wall * os.cpu_count()))
    return figures


def run_rounds(ctx, arms, rounds, log):
    """All arms every round, the order reversed every other round (ABBA), so drift in the
    machine's load falls on every arm alike. Each arm run is appended to `log` at once, so a
    long run that dies late still leaves its figures."""
    runs = []
    for r in range(rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            fig = run_arm(ctx, arm)
            fig["round"] = r + 1
            runs.append(fig)
            with open(log, "a") as f:
                f.write(json.dumps(fig) + "\n")
            say(f"round {r + 1} {arm}: " + (fig["error"] or ", ".join(
                f"{k} {fig[k]:.3g}" for k, _, _ in METRICS if k in fig)))
    return runs


# ---------------------------------------------------------------- summary and table


def summarize(runs, arms):
    """Per arm and metric: median, min, max over the rounds that succeeded."""
    out = {}
    for arm in arms:
        ok = [r for r in runs if r["arm"] == arm and not r["error"]]
        out[arm] = {"rounds_ok": len(ok), "rounds_failed": sum(1 for r in runs if r["arm"] == arm and r["error"])}
        for key, _, _ in METRICS + [("b1_acceptance", "", ""), ("b8_acceptance", "", ""), ("others_cpu_share", "", "")]:
            vals = [r[key] for r in ok if key in r]
            if vals:
                out[arm][key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}
    return out


def ratios(summary):
    """cohort / peer, ratio of medians, per metric (for TTFT below 1 means cohort is faster)."""
    out = {}
    for c in COHORTS:
        for p in PEERS:
            if c not in summary or p not in summary:
                continue
            row = {}
            for key, _, _ in METRICS:
                a, b = summary[c].get(key), summary[p].get(key)
                if a and b and b["median"]:
                    row[key] = a["median"] / b["median"]
            out[f"{c} / {p}"] = row
    return out


def cell(stat, fmt):
    if not stat:
        return "n/a"
    return f"{fmt.format(stat['median'])} ({fmt.format(stat['min'])}-{fmt.format(stat['max'])})"


def markdown(receipt):
    s, cfg = receipt["summary"], receipt["config"]
    lines = [
        f"SmolLM2-135M-Instruct on the CPU ({receipt['machine']['cpu']}, {receipt['machine']['nproc']} cores), "
        f"prompt {cfg['prompt_len']} tokens, {cfg['gen']} generated (greedy, EOS ignored), "
        f"{cfg['rounds']} rounds ABBA, medians (min-max); commit {receipt['commit']['head'][:7]}"
        + (" (plus uncommitted changes)" if receipt["commit"]["dirty"] else "") + ".",
        f"`uptime` at the start: `{receipt['machine']['uptime_start']}`; at the end: `{receipt['machine']['uptime_end']}`.",
        "",
        "| arm | " + " | ".join(t for _, t, _ in METRICS) + " | MTP acceptance B1 / B8 | other processes' CPU share |",
        "| --- |" + " --- |" * (len(METRICS) + 2),
    ]
    for arm in receipt["arms"]:
        a = s[arm]
        acc = ""
        if "b1_acceptance" in a and arm != "cohort AR":
            acc = f"{a['b1_acceptance']['median']:.2f} / {a.get('b8_acceptance', {}).get('median', 0):.2f}"
        fail = f" ({a['rounds_failed']} rounds failed)" if a["rounds_failed"] else ""
        lines.append(f"| {arm}{fail} | " + " | ".join(cell(a.get(k), f) for k, _, f in METRICS)
                     + f" | {acc} | {cell(a.get('others_cpu_share'), '{:.0%}')} |")
    lines += ["", "| ratio of medians | " + " | ".join(t for _, t, _ in METRICS) + " |",
              "| --- |" + " --- |" * len(METRICS)]
    for name, row in receipt["ratios"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[k]:.2f}x" if k in row else "n/a" for k, _, _ in METRICS) + " |")
    lines += quietest(receipt)
    lines += ["", "Command: `" + receipt["command"].strip() + "`", ""] + notes(receipt)
    return "\n".join(lines) + "\n"


def quietest(receipt):
    """Each arm's round in which other processes took the least CPU: on a shared machine the
    median can still be a disturbed round, and this shows what an undisturbed one looked like."""
    lines = ["", "Each arm's quietest round (least CPU taken by other processes):", "",
             "| arm | round | other processes' CPU share | " + " | ".join(t for _, t, _ in METRICS) + " |",
             "| --- | --- | --- |" + " --- |" * len(METRICS)]
    for arm in receipt["arms"]:
        ok = [r for r in receipt["runs"] if r["arm"] == arm and not r["error"]]
        if not ok:
            continue
        r = min(ok, key=lambda x: x["others_cpu_share"])
        lines.append(f"| {arm} | {r['round']} | {r['others_cpu_share']:.0%} | "
                     + " | ".join(f.format(r[k]) if k in r else "n/a" for k, _, f in METRICS) + " |")
    return lines


def notes(receipt):
    """What each arm measured, in the table's own words, so the table can travel alone."""
    cfg, v = receipt["config"], receipt["versions"]
    mlx = v.get("mlx-lm worker") or {}
    return [
        f"- mlx-lm {mlx.get('mlx_lm', '?')} on mlx {mlx.get('mlx', '?')} (PyPI `mlx-cpu`, its BLAS linked to Debian's "
        "OpenBLAS as for cohort), the MLX import of the GGUF; float parameters cast to float32. `4-bit`: the "
        "quantized layers as loaded (MLX's CPU quantized matmul); `f32`: `mlx_lm.utils.dequantize_model` first. "
        "B1: `generate_step` (greedy); B8: `BatchGenerator` with the 8 prompts inserted at once, no stop tokens.",
        f"- llama.cpp {v['llama.cpp']['version'][0] if v['llama.cpp']['version'] else '?'}, vendored by PyPI's "
        f"llama-cpp-python {v['llama.cpp']['llama_cpp_python_sdist']} sdist, built CPU-only with `-march=native`; "
        f"`llama-batched-bench -npp {cfg['prompt_len']} -ntg {cfg['gen']} -npl 1,8 -t {cfg['threads_llama_cpp']}` on the "
        "Q4_1 GGUF (prompts not shared). It feeds random token ids of the same lengths and computes every "
        "position's logits without sampling; TTFT = its prompt time, B8 end to end = 8 x generated / (prompt + "
        "generation time).",
        f"- {v['cohort']}: `cohort generate` with `prompt_ids`, temperature 0, `ignore_eos`; its own figures (model "
        "load excluded). B1: `--scheduler serial` after a short warm-up request; B8: `--scheduler cohort` (preset "
        f"{cfg.get('b8_preset') or 'throughput'}), 8 warm-up requests then the 8 prompts as one cohort; B8 wall = the rows' prefill times "
        "(prefilled one after another) + the longest decode time. AR: `--generation-mode ar`; MTP: the default mode "
        "with the shipped head as `mtp.safetensors`.",
        f"- mlx-lm and cohort get the same token ids: 8 chat prompts of exactly {cfg['prompt_len']} tokens (the chat template around excerpts of `{cfg['text']}`); B1 uses the first. Every "
        "arm gets a warm-up in its process; each arm runs in fresh processes every round.",
        "- Ratios are cohort / peer of the medians; for TTFT below 1 means cohort answers sooner.",
        "- Other processes' CPU share: the machine's busy CPU time during the arm's runs (/proc/stat) minus the "
        "arm's own, over wall time x cores; the noise each arm saw.",
    ]


# ---------------------------------------------------------------- receipt facts


def sh(cmd, cwd=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine():
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")), "?")
    mem = next((x.split()[1] for x in open("/proc/meminfo") if x.startswith("MemTotal")), "0")
    return {"cpu": cpu, "nproc": os.cpu_count(), "mem_gib": round(int(mem) / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "uptime_start": sh(["uptime"]),
            "load_start": os.getloadavg()[0],
            "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS") if k in os.environ}}


def commit(root):
    dirty = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {"head": sh(["git", "rev-parse", "HEAD"], cwd=root), "dirty": bool(dirty), "modified": dirty.splitlines()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot_cohort(root, peers):
    """A private copy of the release binary: another build may replace target/release/cohort
    during the run, and every round must run the same binary."""
    src = os.path.join(root, "target/release/cohort")
    dst = os.path.join(peers, "cohort-snapshot")
    shutil.copy2(src, dst)
    return dst


def llama_version(peers, binary):
    stamp = os.path.join(peers, "llama.cpp/.complete")
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return {"llama_cpp_python_sdist": open(stamp).read().strip() if os.path.exists(stamp) else "?",
            "version": (p.stdout + p.stderr).strip().splitlines()[0:2]}


def say(msg):
    print(f"[peers] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- main


class Ctx:
    """What every arm runner needs."""

    def __init__(self, args, prompts, prompts_file, cohort):
        self.model, self.gguf, self.gen, self.threads = args.model, args.gguf, args.gen, args.threads
        self.prompt_len, self.timeout = args.prompt_len, args.timeout
        self.b8_preset = args.b8_preset
        self.b8 = not args.b1_only
        self.prompts, self.prompts_file, self.cohort = prompts, prompts_file, cohort
        self.llama_bench = os.path.join(args.peers, "llama.cpp/bin/llama-batched-bench")


def parse(argv):
    if argv and argv[0] == "render":
        ap = argparse.ArgumentParser(prog="bench.py render", description="rewrite table.md from a receipt")
        ap.add_argument("receipt")
        return "render", ap.parse_args(argv[1:])
    if argv and argv[0] == "mlx-worker":
        ap = argparse.ArgumentParser(prog="bench.py mlx-worker")
        ap.add_argument("--model", required=True)
        ap.add_argument("--weights", choices=["q4", "f32"], required=True)
        ap.add_argument("--prompts", required=True)
        ap.add_argument("--gen", type=int, required=True)
        return "mlx-worker", ap.parse_args(argv[1:])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=root)
    ap.add_argument("--peers", default=os.path.join(root, ".runtime/peers"))
    ap.add_argument("--model", required=True, help="the MLX import of the GGUF (mtp.safetensors beside it)")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=300)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="llama.cpp threads (default: all cores)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    ap.add_argument("--text", default=os.path.join(root, "README.md"), help="where the prompts' excerpts come from")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per arm process")
    ap.add_argument("--b8-preset", help="cohort's preset for the B8 run (default: the default preset's; "
                    "`sealed` for long prompts, which a continuous lane starts decoding one by one)")
    ap.add_argument("--b1-only", action="store_true",
                    help="one row only (cohort and llama.cpp; mlx-lm runs both): at 8,000 prompt tokens a B8 pass "
                    "reads 64,000 tokens per arm and round")
    ap.add_argument("--out", help="output folder (default: .runtime/peers/results/<time>)")
    return "bench", ap.parse_args(argv)


def main(argv):
    kind, args = parse(argv)
    if kind == "mlx-worker":
        return mlx_worker(args)
    if kind == "render":
        table = markdown(json.load(open(args.receipt)))
        open(os.path.join(os.path.dirname(os.path.abspath(args.receipt)), "table.md"), "w").write(table)
        print(table)
        return 0
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    check(all(a in ARMS for a in arms), f"--arms: unknown arm in {arms}; known: {ARMS}")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join(args.peers, "results", stamp)
    os.makedirs(out, exist_ok=True)
    typed = os.environ.get("COHORT_PEERS_COMMAND") or " ".join([os.path.relpath(sys.argv[0], args.root)] + argv)
    receipt = {"command": typed, "started": stamp,
               "machine": machine(), "commit": commit(args.root), "arms": arms,
               "config": {"prompt_len": args.prompt_len, "gen": args.gen, "rounds": args.rounds,
                          "threads_llama_cpp": args.threads, "b8_preset": args.b8_preset, "model": args.model, "gguf": args.gguf,
                          "gguf_sha256": sha256(args.gguf),
                          "mlx_weights_sha256": sha256(os.path.join(args.model, "model.safetensors")),
                          "mtp_head_sha256": sha256(os.path.join(args.model, "mtp.safetensors")), "text": os.path.relpath(args.text, args.root),
                          "warm_up": {"prompt": WARM_PROMPT, "gen": WARM_GEN}}}
    prompts = build_prompts(args.model, args.text, args.prompt_len)
    prompts_file = os.path.join(out, "prompts.json")
    json.dump(prompts, open(prompts_file, "w"))
    receipt["config"]["prompts_sha256"] = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
    cohort = snapshot_cohort(args.root, args.peers)
    receipt["versions"] = {"cohort": sh([cohort, "--version"]), "cohort_sha256": sha256(cohort),
                           "llama.cpp": llama_version(args.peers, os.path.join(args.peers, "llama.cpp/bin/llama-bench"))}
    ctx = Ctx(args, prompts, prompts_file, cohort)
    say(f"{len(arms)} arms x {args.rounds} rounds, prompt {args.prompt_len} tokens, {args.gen} generated -> {out}")
    receipt["runs"] = run_rounds(ctx, arms, args.rounds, os.path.join(out, "runs.jsonl"))
    receipt["machine"].update(load_end=os.getloadavg()[0], uptime_end=sh(["uptime"]))
    mlx_info = next((r["info"] for r in receipt["runs"] if "info" in r), None)
    receipt["versions"]["mlx-lm worker"] = mlx_info
    receipt["summary"] = summarize(receipt["runs"], arms)
    receipt["ratios"] = ratios(receipt["summary"])
    return write_results(out, receipt, markdown(receipt))


def write_results(out, receipt, table):
    """table.md and receipt.json into `out`, the table on stdout; exit status 1 if a run failed."""
    open(os.path.join(out, "table.md"), "w").write(table)
    json.dump(receipt, open(os.path.join(out, "receipt.json"), "w"), indent=1)
    print(table)
    say(f"table: {out}/table.md, receipt: {out}/receipt.json")
    return 1 if any(r["error"] for r in receipt["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
