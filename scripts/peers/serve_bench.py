#!/usr/bin/env python3
"""The server comparison (issue #39): eight streaming clients against `cohort serve`,
mlx_lm.server and llama-server, one checkpoint, on this CPU; and cohort's server overhead.

Full run (the peers are set up on first use, several minutes; run it on a quiet machine):

  scripts/peers/run.sh serve                      # 3 rounds ABBA, 8 clients, 128 tokens each
  scripts/peers/run.sh serve --rounds 5 --gen 256 # more rounds / longer answers
  scripts/peers/run.sh serve --rounds 1 --gen 16  # a smoke run (proves every arm end to end)

The table goes to stdout and .runtime/peers/serve-results/<time>/table.md beside receipt.json
(machine, versions, commit, command, every round's raw figures) and each server's log.

Arms (each a fresh server process per round, on a free port, ready when /health says 200, then a
warm-up of 8 concurrent 4-token requests before the measured ones):

  cohort serve      `cohort serve -m DIR` on the MLX import with the shipped MTP head beside it
                    (the default mode: MTP); a private copy of target/release/cohort
  mlx_lm.server     `python -m mlx_lm server --model DIR` (mlx-lm 0.32.2 on mlx 0.32.2, the venv's
                    BLAS swapped to OpenBLAS as for cohort), the same MLX import dequantized to
                    float32 at load (bench.py's "mlx-lm f32" arm: what cohort's CPU weight policy
                    does, and mlx-lm's fastest form on this CPU; its 4-bit CPU path is several
                    times slower). --mlx-weights q4 keeps the 4-bit layers (float parameters cast
                    to float32), --mlx-weights stock serves the import as loaded (float16)
  llama-server      llama.cpp's server on the Q4_1 GGUF, -np 8 slots, -c 8 x (256 + gen, rounded
                    up to 256) tokens, -t/-tb = all cores, no web UI; --no-repack on a CPU with
                    AMX (llama.cpp's AMX matmul segfaults on this checkpoint: llama.cpp#20824)

Every client sends POST /v1/chat/completions, stream: true, temperature 0, max_tokens = --gen,
ignore_eos: true, stream_options.include_usage, with its own prompt ("Marker COHORT-i. Write
about <topic>.", the same across arms). mlx_lm.server has no ignore_eos: its arm runs through a
launcher (this file's `mlx-server` mode) that drops the EOS ids from the server's stop sequences
(the equivalent of the request field; --mlx-eos natural keeps the stock server and counts the
tokens it gives). llama-server's ignore_eos bans the end-of-generation tokens (a logit bias), so
its text differs after the point where the model would stop; cohort decodes past EOS. Either way
every client gets exactly --gen tokens (checked against the usage chunk).

Per round and arm: per client time to first token (request sent to the first non-empty content
chunk), tokens (the server's usage, else content chunks), and aggregate output tok/s = all
clients' tokens / wall time from the first send to the last [DONE]. The table holds medians over
rounds with min-max of: aggregate tok/s, median TTFT, p95 TTFT (over the 8 clients), and the CPU
share other processes took meanwhile (the noise). Rounds run every arm, the order reversed every
other round (ABBA).

Server overhead (also ABBA, in the same rounds): one request, prompt 0, through `cohort generate`
(its own stats: ttft_s and decode_tok_s, model load excluded) and through one streaming client
against `cohort serve` (TTFT measured over HTTP; decode tok/s = (tokens - 1) / (last content chunk
- first content chunk)); both after one warm-up request in the same process. Goal: serve <= 5%
slower. The engine's own TTFT and decode rate for the served request (the usage chunk's `cohort`
field) are beside them, so what HTTP adds can be told from what the engine did differently.

Other cohort builds side by side (each a concurrent arm of its own, "cohort serve (LABEL)", with
its ratio to `cohort serve`): --variant LABEL=PATH, repeated. An arm's server can be given
environment variables: --env ARM=VAR=VALUE, repeated (e.g. the BLAS kernels a peer runs).

usage (normally through scripts/peers/run.sh serve):
  serve_bench.py --model DIR --gguf FILE [--rounds 3] [--gen 128] [--clients 8] [--arms ...]
                 [--variant LABEL=PATH ...] [--env ARM=VAR=VALUE ...]
  serve_bench.py render RECEIPT     rewrite the table beside a receipt
  serve_bench.py mlx-server [--keep-eos] -- ARGS   (internal: mlx_lm.server, EOS not a stop)
"""
import argparse
import datetime
import http.client
import importlib.metadata
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import bench  # noqa: E402  (the batch comparison's receipt helpers)

CONCURRENT = ["cohort serve", "mlx_lm.server", "llama-server"]
OVERHEAD = ["cohort generate x1", "cohort serve x1"]
ARMS = CONCURRENT + OVERHEAD
TOPICS = ["the history of the printing press", "how bees make honey", "the water cycle",
          "a day in a lighthouse", "the rules of chess", "why the sky is blue",
          "building a wooden boat", "the life of a comet"]
WARM_GEN = 4
LLAMA_PROMPT_ROOM = 256  # prompt room per llama-server slot (the prompts here are under 64 tokens)


def llama_ctx(clients, gen):
    """llama-server's -c: each of the clients' slots gets prompt room + gen, rounded up to 256
    (llama.cpp pads a slot's context to 256 and warns when -c does not split evenly)."""
    return clients * -(-(LLAMA_PROMPT_ROOM + gen) // 256) * 256


def has_amx():
    """Whether this CPU has AMX: llama.cpp's native build then repacks the weights into an AMX
    buffer, and its AMX matmul crashes (SIGSEGV in ggml_backend_amx_mul_mat) on this checkpoint,
    llama-server and llama-batched-bench alike (ggml-org/llama.cpp#20824, closed unfixed), so the
    llama-server arm runs with --no-repack there: weights in the ordinary CPU buffer."""
    try:
        return any(line.startswith("flags") and " amx_int8" in line for line in open("/proc/cpuinfo"))
    except OSError:
        return False
# (key, column title, format)
METRICS = [
    ("agg_tok_s", "aggregate tok/s", "{:.1f}"),
    ("ttft_median_s", "TTFT median s", "{:.3f}"),
    ("ttft_p95_s", "TTFT p95 s", "{:.3f}"),
    ("wall_s", "wall s", "{:.2f}"),
]
OVERHEAD_METRICS = [
    ("ttft_s", "TTFT s", "{:.3f}"),
    ("decode_tok_s", "decode tok/s", "{:.1f}"),
    ("engine_ttft_s", "engine's TTFT s", "{:.3f}"),
    ("engine_decode_tok_s", "engine's decode tok/s", "{:.1f}"),
]


def say(msg):
    print(f"[serve] {msg}", file=sys.stderr, flush=True)


def check(ok, why):
    if not ok:
        raise RuntimeError(why)


def prompt(i):
    return f"Marker COHORT-{i}. Write about {TOPICS[i % len(TOPICS)]}."


def body(text, gen, model):
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": gen,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}


def p95(xs):
    """The 95th percentile, linear between order statistics (of 8 values: near the largest)."""
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    at = 0.95 * (len(xs) - 1)
    lo = int(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


# ---------------------------------------------------------------- the streaming client


def stream_chat(port, payload, go, out):
    """One streaming chat request: waits for `go` (all clients start together), then records
    send time, first non-empty content chunk, last content chunk, [DONE], usage and extras."""
    rec = {"error": None, "chunks": 0, "text": "", "usage": None, "finish_reason": None, "extra": {}}
    data = json.dumps(payload).encode()
    go.wait()
    rec["t_send"] = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("POST", "/v1/chat/completions", body=data,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
        while True:
            line = resp.readline()
            if not line:
                raise RuntimeError("the stream ended before [DONE]")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            item = line[5:].strip()
            if item == b"[DONE]":
                rec["t_done"] = time.perf_counter()
                break
            msg = json.loads(item)
            if "error" in msg and not msg.get("choices"):
                raise RuntimeError(f"error event: {msg['error']}")
            if msg.get("usage"):
                rec["usage"] = msg["usage"]
            for k in ("cohort", "timings"):  # cohort's and llama-server's own figures
                if msg.get(k):
                    rec["extra"][k] = msg[k]
            for ch in msg.get("choices") or []:
                content = (ch.get("delta") or {}).get("content")
                if content:
                    now = time.perf_counter()
                    rec.setdefault("t_first", now)
                    rec["t_last"] = now
                    rec["chunks"] += 1
                    rec["text"] += content
                if ch.get("finish_reason"):
                    rec["finish_reason"] = ch["finish_reason"]
        conn.close()
    except (OSError, RuntimeError, ValueError, http.client.HTTPException) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    rec["tokens"] = (rec["usage"] or {}).get("completion_tokens", rec["chunks"])
    out.append(rec)


def clients(port, payloads):
    """All payloads at once, one thread each; the records in payload order."""
    go = threading.Event()
    outs = [[] for _ in payloads]
    threads = [threading.Thread(target=stream_chat, args=(port, p, go, o)) for p, o in zip(payloads, outs)]
    for t in threads:
        t.start()
    time.sleep(0.05)  # every thread waiting on `go`
    go.set()
    for t in threads:
        t.join()
    return [o[0] for o in outs]


# ---------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        r = conn.getresponse()
        status, data = r.status, r.read()
        conn.close()
        return status, data
    except (OSError, http.client.HTTPException):
        return None, b""


class Server:
    """A server process for one arm run: started, waited on until /health says 200, stopped
    (SIGTERM, then SIGKILL) and reaped."""

    def __init__(self, cmd, port, log, env=None, ready_timeout=600):
        self.cmd, self.port, self.log = cmd, port, log
        self.logf = open(log, "w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        while True:
            status, data = get(port, "/health")
            if status == 200:
                break
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{cmd[0]} exited {self.proc.returncode} before ready: {self.tail()}")
            if time.perf_counter() - t0 > ready_timeout:
                self.stop()
                raise RuntimeError(f"{cmd[0]} not ready after {ready_timeout} s: {self.tail()}")
            time.sleep(0.1)
        self.ready_s = time.perf_counter() - t0
        self.health = data.decode(errors="replace")[:2000]

    def tail(self):
        if not self.logf.closed:
            self.logf.flush()
        return open(self.log, errors="replace").read()[-2000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


def concurrent(arm):
    return arm in CONCURRENT or arm.startswith("cohort serve (")


def server_cmd(ctx, arm, port):
    if arm.startswith("cohort serve ("):
        return [ctx.variants[arm], "serve", "--host", "127.0.0.1", "--port", str(port), "-m", ctx.model], "default"
    if arm.startswith("cohort serve"):
        return [ctx.cohort, "serve", "--host", "127.0.0.1", "--port", str(port), "-m", ctx.model], "default"
    if arm == "mlx_lm.server":
        launcher = [sys.executable, os.path.abspath(__file__), "mlx-server"]
        if ctx.mlx_eos == "natural":
            launcher.append("--keep-eos")
        launcher += ["--weights", ctx.mlx_weights]
        return launcher + ["--", "--model", ctx.model, "--host", "127.0.0.1", "--port", str(port),
                           "--max-tokens", str(ctx.gen), "--log-level", "WARNING"], "default_model"
    if arm == "llama-server":
        return [ctx.llama_server, "-m", ctx.gguf, "--host", "127.0.0.1", "--port", str(port),
                "-np", str(ctx.clients), "-c", str(llama_ctx(ctx.clients, ctx.gen)), "-t", str(ctx.threads),
                "-tb", str(ctx.threads), "--no-webui"] + (["--no-repack"] if ctx.no_repack else []), "default"
    raise KeyError(arm)


def with_server(ctx, arm, run):
    """Start the arm's server, run(port, model_name), stop it; the figures and the server facts."""
    port = free_port()
    cmd, model = server_cmd(ctx, arm, port)
    log = os.path.join(ctx.out, f"r{ctx.round}-{arm.replace(' ', '_')}.log")
    env = dict(os.environ, **ctx.envs.get(arm, {})) if arm in ctx.envs else None
    srv = Server(cmd, port, log, env=env, ready_timeout=ctx.timeout)
    try:
        figures = run(port, model)
    finally:
        rc = srv.stop()
    figures.update(server_command=cmd, server_ready_s=srv.ready_s, server_health=srv.health,
                   server_exit=rc, server_log=os.path.relpath(log, ctx.out))
    return figures


def check_tokens(ctx, recs, gen, arm):
    errors = [r["error"] for r in recs if r["error"]]
    check(not errors, f"{arm}: {errors[0]}" if errors else "")
    if not (arm == "mlx_lm.server" and ctx.mlx_eos == "natural"):
        tokens = [r["tokens"] for r in recs]
        check(all(t == gen for t in tokens), f"{arm}: clients got {tokens} tokens, not {gen} each")


def concurrent_arm(ctx, arm):
    def run(port, model):
        warm = [body(f"Warm-up {i}. Say hello.", WARM_GEN, model) for i in range(ctx.clients)]
        check_tokens(ctx, clients(port, warm), WARM_GEN, arm)
        recs = clients(port, [body(prompt(i), ctx.gen, model) for i in range(ctx.clients)])
        check_tokens(ctx, recs, ctx.gen, arm)
        t0 = min(r["t_send"] for r in recs)
        wall = max(r["t_done"] for r in recs) - t0
        ttft = [r["t_first"] - r["t_send"] for r in recs]
        total = sum(r["tokens"] for r in recs)
        return {
            "agg_tok_s": total / wall,
            "ttft_median_s": statistics.median(ttft),
            "ttft_p95_s": p95(ttft),
            "wall_s": wall,
            "tokens": [r["tokens"] for r in recs],
            "chunks": [r["chunks"] for r in recs],
            "prompt_tokens": [(r["usage"] or {}).get("prompt_tokens") for r in recs],
            "client_ttft_s": ttft,
            "finish_reasons": [r["finish_reason"] for r in recs],
            "texts": [r["text"] for r in recs],
            "extra": [r["extra"] for r in recs],
        }
    return with_server(ctx, arm, run)


def serve_x1_arm(ctx):
    def run(port, model):
        check_tokens(ctx, clients(port, [body("Warm-up. Say hello.", WARM_GEN, model)]), WARM_GEN, "cohort serve x1")
        (r,) = clients(port, [body(prompt(0), ctx.gen, model)])
        check_tokens(ctx, [r], ctx.gen, "cohort serve x1")
        return {
            "ttft_s": r["t_first"] - r["t_send"],
            "decode_tok_s": (r["tokens"] - 1) / (r["t_last"] - r["t_first"]),
            "e2e_s": r["t_done"] - r["t_send"],
            "tokens": r["tokens"], "chunks": r["chunks"],
            "prompt_tokens": (r["usage"] or {}).get("prompt_tokens"),
            "server_stats": r["extra"].get("cohort"), "text": r["text"],
            **{f"engine_{k}": (r["extra"].get("cohort") or {}).get(k) for k in ("ttft_s", "decode_tok_s")},
        }
    return with_server(ctx, "cohort serve x1", run)


def generate_x1_arm(ctx):
    """`cohort generate` on the same request (chat messages), after the same warm-up request.
    The requests go in over stdin one after the other (the next once the last one's result line
    is out), so the measured request runs alone, as the single client's does over HTTP."""
    msg = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    reqs = [{"id": "warm", "messages": msg("Warm-up. Say hello."), "max_tokens": WARM_GEN},
            {"id": "x1", "messages": msg(prompt(0)), "max_tokens": ctx.gen}]
    cmd = [ctx.cohort, "generate", "-m", ctx.model, "-i", "-"]
    err = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    timer = threading.Timer(ctx.timeout, proc.kill)
    timer.start()
    lines = []
    try:
        for r in reqs:
            proc.stdin.write(json.dumps(dict(r, temperature=0, ignore_eos=True)) + "\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                check(line, f"cohort generate ended early (exit {proc.poll()})")
                if line.startswith("{"):
                    lines.append(json.loads(line))
                    break
        proc.stdin.close()
        proc.wait()
    except (RuntimeError, OSError) as e:
        proc.kill()
        proc.wait()
        err.seek(0)
        raise RuntimeError(f"{e}: {err.read()[-2000:]}")
    finally:
        timer.cancel()
    err.seek(0)
    probe = [x for x in err.read().splitlines() if x.startswith("cohort:")]
    check(proc.returncode == 0, f"cohort generate exited {proc.returncode}")
    (x1,) = [x for x in lines if x.get("id") == "x1"]
    s = x1["stats"]
    check(s["completion_tokens"] == ctx.gen, f"cohort generate x1: {s['completion_tokens']} tokens, not {ctx.gen}")
    return {"ttft_s": s["ttft_s"], "decode_tok_s": s["decode_tok_s"], "engine_ttft_s": s["ttft_s"],
            "engine_decode_tok_s": s["decode_tok_s"], "tokens": s["completion_tokens"],
            "prompt_tokens": s.get("prompt_tokens"), "stats": s, "text": x1.get("text"), "command": cmd,
            "probe": probe}


def run_arm(ctx, arm):
    """One arm once; plus the CPU share other processes took meanwhile (bench.py's measure)."""
    runners = {
        "cohort serve": lambda: concurrent_arm(ctx, arm),
        "mlx_lm.server": lambda: concurrent_arm(ctx, arm),
        "llama-server": lambda: concurrent_arm(ctx, arm),
        "cohort serve x1": lambda: serve_x1_arm(ctx),
        "cohort generate x1": lambda: generate_x1_arm(ctx),
    }
    load0, t0, busy0, own0 = os.getloadavg()[0], time.time(), bench.busy_cpu_s(), bench.own_cpu_s()
    try:
        figures = runners[arm]() if arm in runners else concurrent_arm(ctx, arm)
        figures["error"] = None
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError, ValueError) as e:
        figures = {"error": str(e)[-3000:]}
    wall = time.time() - t0
    others = max(0.0, (bench.busy_cpu_s() - busy0) - (bench.own_cpu_s() - own0))
    figures.update(arm=arm, load1_before=load0, load1_after=os.getloadavg()[0], arm_wall_s=wall,
                   others_cpu_share=others / (wall * os.cpu_count()))
    return figures


def run_rounds(ctx, arms, rounds, log):
    runs = []
    for r in range(rounds):
        ctx.round = r + 1
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            fig = run_arm(ctx, arm)
            fig["round"] = r + 1
            runs.append(fig)
            with open(log, "a") as f:
                f.write(json.dumps(fig) + "\n")
            keys = METRICS if concurrent(arm) else OVERHEAD_METRICS
            say(f"round {r + 1} {arm}: " + (fig["error"] or ", ".join(
                f"{k} {fig[k]:.3g}" for k, _, _ in keys if k in fig)))
    return runs


# ---------------------------------------------------------------- summary and table


def summarize(runs, arms):
    out = {}
    keys = [k for k, _, _ in METRICS + OVERHEAD_METRICS] + ["others_cpu_share"]
    for arm in arms:
        ok = [r for r in runs if r["arm"] == arm and not r["error"]]
        out[arm] = {"rounds_ok": len(ok), "rounds_failed": sum(1 for r in runs if r["arm"] == arm and r["error"])}
        for key in keys:
            vals = [r[key] for r in ok if key in r and isinstance(r[key], (int, float))]
            if vals:
                out[arm][key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}
        ttfts = [t for r in ok for t in r.get("client_ttft_s", [])]
        if ttfts:  # every client of every round together
            out[arm]["pooled_ttft"] = {"n": len(ttfts), "median": statistics.median(ttfts), "p95": p95(ttfts)}
    return out


def ratios(summary):
    out = {}
    c = summary.get("cohort serve")
    for peer in ["mlx_lm.server", "llama-server"] + [a for a in summary if a.startswith("cohort serve (")]:
        p = summary.get(peer)
        if c and p:
            out[f"cohort serve / {peer}"] = {k: c[k]["median"] / p[k]["median"] for k, _, _ in METRICS
                                             if k in c and k in p and p[k]["median"]}
    g, s = summary.get("cohort generate x1"), summary.get("cohort serve x1")
    if g and s:
        out["cohort serve x1 / cohort generate x1"] = {k: s[k]["median"] / g[k]["median"]
                                                       for k, _, _ in OVERHEAD_METRICS[:2]
                                                       if k in g and k in s and g[k]["median"]}
    return out


def markdown(receipt):
    s, cfg, m = receipt["summary"], receipt["config"], receipt["machine"]
    lines = [
        f"SmolLM2-135M-Instruct on the CPU ({m['cpu']}, {m['nproc']} cores): {cfg['clients']} concurrent streaming "
        f"chat clients, {cfg['gen']} tokens each (greedy, EOS ignored), {cfg['rounds']} rounds ABBA, medians "
        f"(min-max); commit {receipt['commit']['head'][:7]}"
        + (" (plus uncommitted changes)" if receipt["commit"]["dirty"] else "") + ".",
        f"`uptime` at the start: `{m['uptime_start']}`; at the end: `{m.get('uptime_end', '?')}`.",
        "",
        "| arm | " + " | ".join(t for _, t, _ in METRICS) + " | prompt tokens | other processes' CPU share |",
        "| --- |" + " --- |" * (len(METRICS) + 2),
    ]
    for arm in [a for a in receipt["arms"] if concurrent(a)]:
        a = s[arm]
        fail = f" ({a['rounds_failed']} rounds failed)" if a["rounds_failed"] else ""
        ok = [r for r in receipt["runs"] if r["arm"] == arm and not r["error"]]
        pt = sorted({x for r in ok for x in r.get("prompt_tokens", []) if x is not None})
        pts = f"{pt[0]}-{pt[-1]}" if pt else "n/a"
        lines.append(f"| {arm}{fail} | " + " | ".join(bench.cell(a.get(k), f) for k, _, f in METRICS)
                     + f" | {pts} | {bench.cell(a.get('others_cpu_share'), '{:.0%}')} |")
    over = [a for a in receipt["arms"] if a in OVERHEAD]
    if over:
        lines += ["", "Server overhead, one request (prompt 0):", "",
                  "| arm | " + " | ".join(t for _, t, _ in OVERHEAD_METRICS) + " | other processes' CPU share |",
                  "| --- |" + " --- |" * (len(OVERHEAD_METRICS) + 1)]
        for arm in over:
            a = s[arm]
            fail = f" ({a['rounds_failed']} rounds failed)" if a["rounds_failed"] else ""
            lines.append(f"| {arm}{fail} | " + " | ".join(bench.cell(a.get(k), f) for k, _, f in OVERHEAD_METRICS)
                         + f" | {bench.cell(a.get('others_cpu_share'), '{:.0%}')} |")
    conc = {k: v for k, v in receipt["ratios"].items() if "x1" not in k}
    if conc:
        lines += ["", "| ratio of medians | " + " | ".join(t for _, t, _ in METRICS) + " |",
                  "| --- |" + " --- |" * len(METRICS)]
        for name, row in conc.items():
            lines.append(f"| {name} | " + " | ".join(f"{row[k]:.2f}x" if k in row else "n/a" for k, _, _ in METRICS) + " |")
    ov = receipt["ratios"].get("cohort serve x1 / cohort generate x1")
    if ov:
        lines += ["", "cohort serve x1 / cohort generate x1 (medians): "
                  + ", ".join(f"{t} {ov[k]:.3f}x" for k, t, _ in OVERHEAD_METRICS if k in ov)
                  + (f" (serve's decode rate is {ov['decode_tok_s']:.1%} of generate's; goal >= 95%)"
                     if "decode_tok_s" in ov else "")]
    lines += ["", "Command: `" + receipt["command"].strip() + "`", ""] + notes(receipt)
    return "\n".join(lines) + "\n"


def notes(receipt):
    cfg, v = receipt["config"], receipt["versions"]
    return [
        f"- {v['cohort']}: `cohort serve -m DIR` (default profile and mode; MTP head `mtp.safetensors` beside the import).",
        f"- mlx-lm {v['mlx_lm']} on mlx {v['mlx']} (mlx-cpu, BLAS swapped to OpenBLAS): `python -m mlx_lm server`, "
        + {"f32": "the import dequantized to float32 at load (as cohort's CPU weight policy), ",
           "q4": "4-bit layers, float parameters cast to float32 at load, ",
           "stock": "the import as loaded (4-bit, float16), "}[cfg["mlx_weights"]]
        + "its default --decode-concurrency 32 / --prompt-concurrency 8; "
        + ("EOS removed from its stop sequences by this script's launcher (it has no ignore_eos)."
           if cfg["mlx_eos"] == "patch" else "stock EOS handling: it stops at EOS, tokens counted as given."),
        f"- llama.cpp {v['llama.cpp']['version'][0] if v['llama.cpp']['version'] else '?'} (vendored by llama-cpp-python "
        f"{v['llama.cpp']['llama_cpp_python_sdist']}, CPU, -march=native): `llama-server -np {cfg['clients']} "
        f"-c {cfg['llama_ctx']} -t {cfg['threads']} -tb {cfg['threads']}"
        + (" --no-repack" if cfg.get("llama_no_repack") else "") + "` on the Q4_1 GGUF; ignore_eos bans "
        "end-of-generation tokens"
        + ("; --no-repack because this CPU has AMX and llama.cpp's AMX matmul crashes on this checkpoint "
           "(ggml-org/llama.cpp#20824)." if cfg.get("llama_no_repack") else "."),
        "- TTFT: request sent to the first non-empty content chunk, at the client (Python http.client, one thread "
        "per client, all released together); aggregate = tokens (usage) / first send to last [DONE]; p95 over the "
        "clients of a round. Every server gets a warm-up of concurrent 4-token requests first.",
        "- Server overhead: `cohort generate` (its own ttft_s / decode_tok_s, one warm-up request first) vs one "
        "streaming client against `cohort serve` (TTFT measured over HTTP, decode = (tokens - 1) / (last - first "
        "content chunk)).",
        "- Other processes' CPU share: busy CPU time of the machine during the arm minus the arm's own (server "
        "included), over wall time x cores (bench.py's measure).",
    ]


# ---------------------------------------------------------------- the mlx_lm.server launcher


def mlx_server(argv):
    """mlx_lm.server as `python -m mlx_lm server` runs it, except: unless --keep-eos, EOS ids are
    not stop sequences (the server equivalent of ignore_eos, which mlx-lm's API lacks); with
    --weights f32, every quantized layer is dequantized and the float parameters cast to float32
    (bench.py's "mlx-lm f32" arm); with --weights q4, only the float parameters (fp16 in the
    import: scales, biases, norms) are cast to float32 (bench.py's "mlx-lm 4-bit" arm)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="serve_bench.py mlx-server")
    ap.add_argument("--keep-eos", action="store_true")
    ap.add_argument("--weights", choices=["f32", "q4", "stock"], default="stock")
    opts = ap.parse_args(argv[:cut])
    import mlx.core as mx
    import mlx_lm.server as srv
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.generate import StopSequences

    if not opts.keep_eos:
        def no_eos_stops(tokenizer, stop_words=None):
            return StopSequences([tuple(tokenizer.encode(w, add_special_tokens=False)) for w in stop_words or []])
        srv.make_stop_sequences = no_eos_stops
    if opts.weights != "stock":
        from mlx_lm.utils import dequantize_model
        stock_load = srv.load

        def load_float32(*a, **k):
            out = list(stock_load(*a, **k))
            if opts.weights == "f32":
                out[0] = dequantize_model(out[0])
            model = out[0]
            floats = [(n, v.astype(mx.float32)) for n, v in tree_flatten(model.parameters())
                      if mx.issubdtype(v.dtype, mx.floating)]
            model.update(tree_unflatten(floats))
            mx.eval(model.parameters())
            dtypes = sorted({str(v.dtype) for _, v in tree_flatten(model.parameters())})
            print(f"serve_bench mlx-server: weights {opts.weights}, parameter dtypes {dtypes}", file=sys.stderr, flush=True)
            return tuple(out)
        srv.load = load_float32
    sys.argv = ["mlx_lm.server"] + argv[cut + 1:]
    srv.main()


# ---------------------------------------------------------------- main


class Ctx:
    def __init__(self, args, cohort, out):
        self.model, self.gguf, self.gen, self.clients = args.model, args.gguf, args.gen, args.clients
        self.threads, self.timeout, self.mlx_eos = args.threads, args.timeout, args.mlx_eos
        self.mlx_weights = args.mlx_weights
        self.no_repack = has_amx()
        self.cohort, self.out, self.round = cohort, out, 0
        self.llama_server = os.path.join(args.peers, "llama.cpp/bin/llama-server")
        self.variants = {f"cohort serve ({label})": os.path.abspath(path) for label, path in
                         (v.split("=", 1) for v in args.variant)}
        self.envs = {}
        for spec in args.env:
            arm, var, value = spec.split("=", 2)
            self.envs.setdefault(arm, {})[var] = value


def parse(argv):
    if argv and argv[0] == "render":
        ap = argparse.ArgumentParser(prog="serve_bench.py render")
        ap.add_argument("receipt")
        return "render", ap.parse_args(argv[1:])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=root)
    ap.add_argument("--peers", default=os.path.join(root, ".runtime/peers"))
    ap.add_argument("--model", required=True, help="the MLX import of the GGUF (mtp.safetensors beside it)")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=128, help="tokens per client")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="llama-server threads (default: all cores)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    ap.add_argument("--mlx-eos", choices=["patch", "natural"], default="patch",
                    help="patch: EOS is no stop for mlx_lm.server (default); natural: stock server, tokens counted")
    ap.add_argument("--mlx-weights", choices=["f32", "q4", "stock"], default="f32",
                    help="mlx_lm.server's weights: f32 = dequantized to float32 at load (default; bench.py's "
                         "'mlx-lm f32'), q4 = 4-bit layers, float parameters float32 ('mlx-lm 4-bit'), "
                         "stock = the import as loaded (float16)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for a server to get ready / a generate run")
    ap.add_argument("--out", help="output folder (default: .runtime/peers/serve-results/<time>)")
    ap.add_argument("--variant", action="append", default=[], help="LABEL=PATH: another cohort build as an arm")
    ap.add_argument("--env", action="append", default=[], help="ARM=VAR=VALUE: environment for an arm's server")
    return "bench", ap.parse_args(argv)


def main(argv):
    if argv and argv[0] == "mlx-server":
        return mlx_server(argv[1:])
    kind, args = parse(argv)
    if kind == "render":
        table = markdown(json.load(open(args.receipt)))
        open(os.path.join(os.path.dirname(os.path.abspath(args.receipt)), "table.md"), "w").write(table)
        print(table)
        return 0
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    check(all(a in ARMS for a in arms), f"--arms: unknown arm in {arms}; known: {ARMS}")
    check(all("=" in v for v in args.variant), "--variant takes LABEL=PATH")
    check(all(e.count("=") >= 2 for e in args.env), "--env takes ARM=VAR=VALUE")
    arms[1:1] = [f"cohort serve ({v.split('=', 1)[0]})" for v in args.variant]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join(args.peers, "serve-results", stamp))
    os.makedirs(out, exist_ok=True)
    typed = os.environ.get("COHORT_PEERS_COMMAND") or " ".join([os.path.relpath(sys.argv[0], args.root)] + argv)
    cohort = bench.snapshot_cohort(args.root, args.peers)
    llama_server = os.path.join(args.peers, "llama.cpp/bin/llama-server")
    receipt = {
        "command": typed, "started": stamp, "machine": bench.machine(), "commit": bench.commit(args.root),
        "arms": arms,
        "config": {"variants": args.variant, "env": args.env, "gen": args.gen, "clients": args.clients, "rounds": args.rounds, "threads": args.threads,
                   "mlx_eos": args.mlx_eos, "mlx_weights": args.mlx_weights, "model": args.model, "gguf": args.gguf,
                   "gguf_sha256": bench.sha256(args.gguf),
                   "mlx_weights_sha256": bench.sha256(os.path.join(args.model, "model.safetensors")),
                   "mtp_head_sha256": bench.sha256(os.path.join(args.model, "mtp.safetensors")),
                   "prompts": [prompt(i) for i in range(args.clients)], "warm_up_gen": WARM_GEN,
                   "llama_ctx": llama_ctx(args.clients, args.gen), "llama_no_repack": has_amx()},
        "versions": {"cohort": bench.sh([cohort, "--version"]), "cohort_sha256": bench.sha256(cohort),
                     "mlx": importlib.metadata.version("mlx"), "mlx_lm": importlib.metadata.version("mlx-lm"),
                     "llama.cpp": (bench.llama_version(args.peers, llama_server) if os.path.exists(llama_server)
                                   else {"llama_cpp_python_sdist": "?", "version": []})},
    }
    ctx = Ctx(args, cohort, out)
    say(f"{len(arms)} arms x {args.rounds} rounds, {args.clients} clients x {args.gen} tokens -> {out}")
    receipt["runs"] = run_rounds(ctx, arms, args.rounds, os.path.join(out, "runs.jsonl"))
    receipt["machine"].update(load_end=os.getloadavg()[0], uptime_end=bench.sh(["uptime"]))
    receipt["summary"] = summarize(receipt["runs"], arms)
    receipt["ratios"] = ratios(receipt["summary"])
    return bench.write_results(out, receipt, markdown(receipt))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
