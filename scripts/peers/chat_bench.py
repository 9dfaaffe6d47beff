#!/usr/bin/env python3
"""Warm conversations (issue #54): time to first token of a conversation's follow-up turns as its
history grows, through `cohort serve` with and without its prompt cache (and with answers read
back while idle, `--prompt-cache-answers read-back`, rather than kept as decoded), llama-server (its default
`cache_prompt`) and mlx_lm.server (its prompt cache), one checkpoint, on this CPU.

  scripts/peers/run.sh chat                       # 2 rounds ABBA, every arm and scenario
  scripts/peers/run.sh chat --rounds 1 --answer 32 --turns 3   # a smoke run

Scenarios, each a fresh server per arm and round, every request streamed with temperature 0 and
ignore_eos (so every arm's answers have the same length; their text differs after the first
place their arithmetic does), the history resent each turn as every OpenAI client does, each
arm's own answers in it:

  turns   a chat of --turns user questions, --answer tokens each: TTFT per turn (the next turn
          sent --think seconds after an answer ends: 0, a script; a few, a person reading it)
  paste   a pasted text of about --paste tokens with a request to summarise it (--answer
          tokens), then three short follow-ups (32 tokens each): TTFT per request
  during  the pasted text sent alone, and --during-delay seconds later a short question (about 37
          tokens) from another client: the question's TTFT (llama-server with two slots)

llama-server runs with -c 8192 (one slot; two for `during`); mlx_lm.server through serve_bench's
launcher (EOS no stop, float32 weights unless --mlx-weights). On a lent GPU, `exact.sh chat` runs it
with --cohort and --mlx-python (scripts/gpu/README.md). Output: a table of medians (min-max) over rounds per
arm and request, and receipt.json beside it under .runtime/peers/chat-results/<time>/.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import bench  # noqa: E402
import serve_bench as sb  # noqa: E402

ARMS = ["cohort serve", "cohort serve (answers read back)", "cohort serve (no cache)", "llama-server", "mlx_lm.server"]
SCENARIOS = ["turns", "paste", "during"]
QUESTIONS = [
    "Tell me about the history of the printing press.", "How did it change how people learned?",
    "What came before it in Europe?", "And in East Asia?", "Which books were printed first?",
    "How fast could an early press work?", "What did printers earn?", "Who opposed the press, and why?",
    "Summarise our conversation so far.",
]
FOLLOW_UPS = ["Thanks. What is 2+2?", "And what is 3+5?", "Give me one word for happy."]
QUESTION_DURING = ("While you read that: what is the capital of France, and how many people live in it "
                   "today, roughly, and in which river valley does it lie?")


def paste_text(root, tokens):
    """About `tokens` tokens of prose (docs/architecture.md, cut at a line), to paste."""
    text = open(os.path.join(root, "docs/architecture.md"), encoding="utf-8").read()
    cut = text[: tokens * 4]
    return "Here is a design document:\n\n" + cut[: cut.rfind("\n")] + "\n\nSummarise it in a few sentences."


def server_cmd(ctx, arm, port, slots):
    if arm.startswith("cohort serve"):
        cmd = [ctx.cohort, "serve", "--host", "127.0.0.1", "--port", str(port), "-m", ctx.model]
        if "answers read back" in arm:
            cmd += ["--prompt-cache-answers", "read-back"]
        return cmd + (["--prompt-cache", "off"] if "no cache" in arm else []), "default"
    if arm == "llama-server":
        return [ctx.llama_server, "-m", ctx.gguf, "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
                "-c", str(8192 * slots), "-t", str(ctx.threads), "-tb", str(ctx.threads), "--no-webui"] + (
                    ["--no-repack"] if sb.has_amx() else []), "default"
    if arm == "mlx_lm.server":
        return ctx.mlx_python + [os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_bench.py"),
                "mlx-server", "--weights", ctx.mlx_weights, "--", "--model", ctx.model, "--host", "127.0.0.1",
                "--port", str(port), "--max-tokens", str(ctx.answer), "--log-level", "WARNING"], "default_model"
    raise KeyError(arm)


def ask(port, model, messages, gen):
    """One streamed chat request; the record (t_send, t_first, text, usage, error)."""
    payload = {"model": model, "messages": messages, "max_tokens": gen, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}, "ignore_eos": True}
    go, out = threading.Event(), []
    go.set()
    sb.stream_chat(port, payload, go, out)
    rec = out[0]
    sb.check(rec["error"] is None, f"a request failed: {rec['error']}")
    rec["ttft_s"] = rec["t_first"] - rec["t_send"]
    return rec


def cached(rec):
    """Prompt tokens the server says it reused (cohort and mlx-lm: usage; llama-server: timings)."""
    usage = rec.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    if "cached_tokens" in details:
        return details["cached_tokens"]
    timings = rec["extra"].get("timings") or {}
    return timings.get("cache_n")


def conversation(port, model, user_turns, gens):
    """Send each user turn after the history so far (with the server's own answers)."""
    messages, out = [], []
    for text, gen in zip(user_turns, gens):
        messages.append({"role": "user", "content": text})
        rec = ask(port, model, messages, gen)
        messages.append({"role": "assistant", "content": rec["text"]})
        out.append({"ttft_s": rec["ttft_s"], "prompt_tokens": (rec.get("usage") or {}).get("prompt_tokens"),
                    "cached_tokens": cached(rec)})
        time.sleep(ARGS.think)  # the user reading the answer before typing the next turn
    return out


def during(port, model, paste, gen):
    """The paste from one client, the short question from another --during-delay s later."""
    recs = {}

    def send(key, text, delay):
        time.sleep(delay)
        recs[key] = ask(port, model, [{"role": "user", "content": text}], gen)

    threads = [threading.Thread(target=send, args=("paste", paste, 0.0)),
               threading.Thread(target=send, args=("question", QUESTION_DURING, ARGS.during_delay))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [{"ttft_s": recs["question"]["ttft_s"], "prompt_tokens": (recs["question"].get("usage") or {}).get(
        "prompt_tokens"), "paste_ttft_s": recs["paste"]["ttft_s"]}]


def run_arm(ctx, arm, scenario, log_dir, rnd):
    slots = 2 if scenario == "during" else 1
    port = sb.free_port()
    cmd, model = server_cmd(ctx, arm, port, slots)
    log = os.path.join(log_dir, f"r{rnd}-{scenario}-{arm.replace(' ', '_').replace('(', '').replace(')', '')}.log")
    srv = sb.Server(cmd, port, log, ready_timeout=1800)
    try:
        ask(port, model, [{"role": "user", "content": "Hello"}], 4)  # warm-up
        if scenario == "turns":
            recs = conversation(port, model, QUESTIONS[: ctx.turns], [ctx.answer] * ctx.turns)
        elif scenario == "paste":
            recs = conversation(port, model, [ctx.paste] + FOLLOW_UPS, [ctx.answer] + [32] * len(FOLLOW_UPS))
        else:
            recs = during(port, model, ctx.paste, ctx.answer)
        # What cohort's prompt cache holds at the end, against its budget.
        status, health = sb.get(port, "/health")
        cache = json.loads(health).get("prompt_cache") if status == 200 and arm.startswith("cohort") else None
    finally:
        srv.stop()
    return {"arm": arm, "scenario": scenario, "round": rnd, "requests": recs, "command": cmd, "prompt_cache": cache}


def table(runs, arms):
    lines = []
    for scenario in SCENARIOS:
        mine = [r for r in runs if r["scenario"] == scenario]
        if not mine:
            continue
        n = max(len(r["requests"]) for r in mine)
        head = "| arm | " + " | ".join(f"{scenario} {i + 1}" for i in range(n)) + " |"
        lines += [f"### {scenario}: time to first token, s (median, min-max over rounds; cached tokens)", "",
                  head, "|" + " --- |" * (n + 1)]
        for arm in arms:
            cells = []
            for i in range(n):
                xs = [r["requests"][i]["ttft_s"] for r in mine if r["arm"] == arm and i < len(r["requests"])]
                cs = [r["requests"][i].get("cached_tokens") for r in mine if r["arm"] == arm and i < len(r["requests"])]
                if not xs:
                    cells.append("-")
                    continue
                c = f"; {cs[0]} cached" if cs and cs[0] is not None else ""
                cells.append(f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f}){c}")
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        lines.append("")
        for r in mine:
            c = r.get("prompt_cache")
            if c:
                lines.append(f"- {r['arm']}, round {r['round'] + 1}: the prompt cache held {c['bytes_held'] / 2**20:.1f} MiB "
                             f"in {c['entries']} entries (budget {c['budget_bytes'] / 2**20:.0f} MiB), {c['hits']} hits, "
                             f"{c['tokens_reused']} tokens reused, {c['evictions']} evicted, {c.get('settled', 0)} answers read back")
        lines.append("")
    return "\n".join(lines)


def parse(argv):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=root)
    ap.add_argument("--peers", default=os.path.join(root, ".runtime/peers"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", default="", help="the GGUF llama-server reads (needed by that arm only)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--turns", type=int, default=9)
    ap.add_argument("--answer", type=int, default=256, help="tokens of each long answer")
    ap.add_argument("--paste", type=int, default=1900, help="tokens of the pasted text, about")
    ap.add_argument("--during-delay", type=float, default=1.5)
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds between an answer's end and the next turn (a user reading it; default 0)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out")
    ap.add_argument("--cohort", help="the cohort binary to serve (default: a copy of target/release/cohort)")
    ap.add_argument("--mlx-python", default=sys.executable,
                    help="the command that runs mlx_lm.server's Python, split at spaces (default: this Python)")
    ap.add_argument("--mlx-weights", choices=["f32", "q4", "stock"], default="f32",
                    help="mlx_lm.server's weights (serve_bench.py mlx-server --weights; f32 matches cohort on the CPU)")
    return ap.parse_args(argv)


class Ctx:
    def __init__(self, args, cohort):
        self.model, self.gguf, self.threads = args.model, args.gguf, args.threads
        self.turns, self.answer, self.cohort = args.turns, args.answer, cohort
        self.paste = paste_text(args.root, args.paste)
        self.llama_server = os.path.join(args.peers, "llama.cpp/bin/llama-server")
        self.mlx_python, self.mlx_weights = args.mlx_python.split(), args.mlx_weights


def main(argv):
    global ARGS
    ARGS = args = parse(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    sb.check(all(a in ARMS for a in arms), f"--arms: known arms are {ARMS}")
    sb.check(all(s in SCENARIOS for s in scenarios), f"--scenarios: known scenarios are {SCENARIOS}")
    sb.check("llama-server" not in arms or os.path.exists(args.gguf), "the llama-server arm needs --gguf FILE")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join(args.peers, "chat-results", stamp))
    os.makedirs(out, exist_ok=True)
    cohort = os.path.abspath(args.cohort) if args.cohort else bench.snapshot_cohort(args.root, args.peers)
    ctx = Ctx(args, cohort)
    runs = []
    for rnd in range(args.rounds):
        order = arms if rnd % 2 == 0 else list(reversed(arms))  # ABBA
        for scenario in scenarios:
            for arm in order:
                sb.say(f"round {rnd + 1}: {scenario} on {arm}")
                runs.append(run_arm(ctx, arm, scenario, out, rnd))
                with open(os.path.join(out, "runs.jsonl"), "a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
    receipt = {"command": " ".join(["scripts/peers/chat_bench.py"] + argv), "started": stamp,
               "machine": bench.machine(), "commit": bench.commit(args.root), "arms": arms,
               "config": vars(args), "runs": runs}
    text = table(runs, arms)
    json.dump(receipt, open(os.path.join(out, "receipt.json"), "w"), indent=1)
    open(os.path.join(out, "table.md"), "w").write(text)
    print(text)
    print(f"\nreceipt: {out}/receipt.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
