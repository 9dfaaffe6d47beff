#!/usr/bin/env python3
"""The Qwen3.6-35B-A3B-geometry checkpoint that mlx-lm and cohort share on the H200 (issues 9, 10).

make:  mlx-lm builds its own qwen3_5_moe model at the real text geometry with random weights,
       quantizes it with the model's predicate (4-bit g64, routers 8-bit g64), and saves it the
       way mlx_lm.convert does (config.json + safetensors). A random MTP layer goes beside it as
       mtp.safetensors + mtp_config.json (4-bit g32, as the real checkpoint's head), so cohort's
       B8 cycle runs on the same files. mlx-lm drops mtp.* at load.
bench: mlx-lm on that checkpoint: B1 greedy decode with generate_step and 8 rows through
       BatchGenerator, one JSON line per round (cohort's side is `cohort-lab bench-step -m DIR`).

usage: q36_mlx_lm.py make --out DIR [--layers 40] [--vocab 248320] [--experts 256]
       q36_mlx_lm.py bench --model DIR [--prompt 512] [--gen 64] [--rounds 3] [--batch 8]
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map_with_path

ROOT = Path(__file__).resolve().parents[2]


def text_config(layers, vocab, experts, hidden, moe_inter):
    """The same geometry as cohort's `--synthetic qwen36-35b-a3b` (crates/lab/src/synth.rs)."""
    return {
        "model_type": "qwen3_5_moe_text", "hidden_size": hidden, "num_hidden_layers": layers,
        "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "rope_parameters": {"type": "default", "rope_theta": 10000000.0,
                                             "partial_rotary_factor": 0.25},
        "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": experts,
        "num_experts_per_tok": 8, "moe_intermediate_size": moe_inter,
        "shared_expert_intermediate_size": moe_inter, "vocab_size": vocab, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "max_position_embeddings": 131072,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
    }


def make(a):
    from mlx_lm.models.qwen3_5_moe import Model, ModelArgs
    from mlx_lm.utils import quantize_model, save_config, save_model

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tc = text_config(a.layers, a.vocab, a.experts, a.hidden, a.moe_inter)
    config = {"model_type": "qwen3_5_moe", "text_config": tc}
    mx.random.seed(a.seed)
    t0 = time.perf_counter()
    model = Model(ModelArgs.from_dict(config))
    # bf16 like a converted checkpoint, A_log kept float32 (the model's cast predicate).
    keep = model.cast_predicate
    model.update(tree_map_with_path(
        lambda path, v: v.astype(mx.bfloat16) if mx.issubdtype(v.dtype, mx.floating) and keep(path) else v,
        model.parameters()))
    model, qconfig = quantize_model(model, config, 64, 4, quant_predicate=model.quant_predicate)
    for layer in model.layers:  # one layer at a time keeps the float intermediates small
        mx.eval(layer.parameters())
    mx.eval(model.parameters())
    print(f"made in {time.perf_counter() - t0:.1f} s, peak {mx.get_peak_memory() / 1e9:.1f} GB", file=sys.stderr)
    save_model(out, model)
    save_config(qconfig, out / "config.json")
    del model
    write_mtp(out, tc)
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    print(json.dumps({"made": str(out), "bytes": size, "s": round(time.perf_counter() - t0, 1)}))


def write_mtp(out, tc):
    """A random MTP layer in the sidecar layout tests/fixtures/make_fixtures.py writes."""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    from make_fixtures import MTPModule
    from mlx_lm.models.qwen3_5 import TextModelArgs

    mod = MTPModule(TextModelArgs.from_dict(tc))
    mod.set_dtype(mx.bfloat16)
    qcfg = {"group_size": 32, "bits": 4, "mode": "affine"}

    def pred(path, m):
        if not hasattr(m, "to_quantized") or m.weight.shape[-1] % 32 != 0:
            return False
        if path.endswith("mlp.gate") or path.endswith("shared_expert_gate"):
            qcfg["mtp." + path] = {"group_size": 64, "bits": 8}
            return {"group_size": 64, "bits": 8}
        return True

    nn.quantize(mod, 32, 4, mode="affine", class_predicate=pred)
    flat = {"mtp." + k: v for k, v in tree_flatten(mod.parameters())}
    mx.eval(flat)
    mx.save_safetensors(str(out / "mtp.safetensors"), flat, metadata={"format": "mlx"})
    (out / "mtp_config.json").write_text(json.dumps({
        "file": "mtp.safetensors", "key_prefix": "mtp.", "num_hidden_layers": 1,
        "naming": "mlx-lm converted naming (MoE experts stacked as switch_mlp.{gate,up,down}_proj)",
        "norm_convention": "multiplier; do not add 1 at load", "dtype": "bfloat16",
        "quantization": qcfg, "source": "random, scripts/gpu/q36_mlx_lm.py",
    }, indent=2) + "\n")


def prompt_ids(n, vocab, salt=0):
    return [(i * 7919 + 13 + salt * 104729) % vocab for i in range(n)]


def bench(a):
    from mlx_lm.generate import BatchGenerator, generate_step
    from mlx_lm.utils import load_model

    t0 = time.perf_counter()
    model, config = load_model(Path(a.model))
    mx.eval(model.parameters())
    vocab = config["text_config"]["vocab_size"]
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    greedy = lambda x: mx.argmax(x, axis=-1)
    for r in range(a.rounds):
        prompt = prompt_ids(a.prompt, vocab, r)
        t0 = time.perf_counter()
        steps = generate_step(mx.array(prompt), model, max_tokens=a.gen, sampler=greedy)
        next(steps)
        t1 = time.perf_counter()
        stamps = [t1]
        for _ in steps:
            stamps.append(time.perf_counter())
        gaps = [b - c for b, c in zip(stamps[1:], stamps)]
        b1 = {"arm": "mlx-lm", "round": r, "prefill_tok_s": a.prompt / (t1 - t0),
              "b1_tok_s": len(gaps) / (stamps[-1] - t1), "b1_step_ms_median": 1e3 * statistics.median(gaps)}
        prompts = [prompt_ids(a.prompt, vocab, 100 + r * a.batch + i) for i in range(a.batch)]
        bg = BatchGenerator(model, max_tokens=a.gen, stop_tokens=None,
                            prefill_batch_size=a.batch, completion_batch_size=a.batch)
        counts = {}
        t0 = time.perf_counter()
        with bg.stats() as st:
            bg.insert(prompts, [a.gen] * a.batch)
            while responses := bg.next_generated():
                for resp in responses:
                    counts[resp.uid] = counts.get(resp.uid, 0) + 1
        wall = time.perf_counter() - t0
        bg.close()
        b1.update({"b8_decode_tok_s": st.generation_tokens / st.decode_time,
                   "b8_prompt_tok_s": st.prompt_tokens / st.prompt_time if st.prompt_time else 0.0,
                   "b8_e2e_tok_s": sum(counts.values()) / wall, "b8_rows": len(counts),
                   "peak_gb": mx.get_peak_memory() / 1e9})
        print(json.dumps(b1), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--layers", type=int, default=40)
    m.add_argument("--vocab", type=int, default=248320)
    m.add_argument("--experts", type=int, default=256)
    m.add_argument("--hidden", type=int, default=2048)
    m.add_argument("--moe-inter", type=int, default=512)
    m.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--prompt", type=int, default=512)
    b.add_argument("--gen", type=int, default=64)
    b.add_argument("--rounds", type=int, default=3)
    b.add_argument("--batch", type=int, default=8)
    a = p.parse_args()
    make(a) if a.cmd == "make" else bench(a)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
