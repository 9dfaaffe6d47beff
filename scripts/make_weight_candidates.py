#!/usr/bin/env python3
"""The CPU weight candidates of docs/benchmarks.md (issue 12): the default model's weights
dequantized by mlx-lm, then re-quantized to 8-bit affine g32 or cast to bfloat16, each saved as an
MLX checkpoint cohort loads.

usage: scripts/make_weight_candidates.py SRC_MODEL_DIR OUT_DIR   (writes OUT_DIR/q8 and OUT_DIR/bf16)
needs: mlx-lm 0.32.2 (e.g. the venv scripts/peers/run.sh sets up)
"""
import json
import os
import shutil
import sys

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm import load
from mlx_lm.utils import dequantize_model, save_model


def main(src, out):
    for kind in ["q8", "bf16"]:
        dst = os.path.join(out, kind)
        os.makedirs(dst, exist_ok=True)
        model, _ = load(src)
        model = dequantize_model(model)
        cfg = json.load(open(os.path.join(src, "config.json")))
        cfg.pop("quantization", None)
        cfg.pop("quantization_config", None)
        if kind == "q8":
            nn.quantize(model, group_size=32, bits=8)
            cfg["quantization"] = {"group_size": 32, "bits": 8, "mode": "affine"}
        else:
            model.update(tree_unflatten([(k, v.astype(mx.bfloat16)) for k, v in tree_flatten(model.parameters())]))
        save_model(dst, model)
        json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
        for f in ["tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(os.path.join(src, f), dst)
        print(kind, dst, sorted({str(v.dtype) for _, v in tree_flatten(model.parameters())}))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
