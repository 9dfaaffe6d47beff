#!/bin/bash
# Session 26, first of three calls: cohort against mlx-lm on one mlx-lm-made checkpoint at the
# real geometry (as r17.sh), with this session's load layouts (src/model/product.rs). Before it:
# `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), `cp .gpu/w3a/* /tmp/x/` (carry .gpu/w3a) and
# `cp .gpu/w3b/* /tmp/x/` (carry .gpu/w3b); this call carries .gpu/w2 .gpu/bin .gpu/ptx
# .gpu/tbin. Order: make, cohort (whose first process fills MLX's JIT cache, saved at once),
# mlx-lm. r34.sh continues ABBA on what this leaves in /tmp.
# Here first: PEERS=1 bash scripts/gpu/prepare.sh qwen35_reference gdn_kernel moe_router
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/wheel3.sh
. scripts/gpu/q36_arms.sh
mkdir -p /tmp/keep && cp -r .gpu/tbin scripts /tmp/keep/
{
echo "=== make"; $PY -c "import mlx.core as mx, mlx_lm; print(mx.__version__, mx.default_device())"
time (timeout 240 $PY scripts/gpu/q36_mlx_lm.py make --out $M 2>&1 | grep -v TMA | tail -3)
du -sh $M; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
time coh_env COHORT_DEFAULTS=1
save_ptx
time mlx
} 2>&1 | tee $OUT/r33.txt
save_ptx
