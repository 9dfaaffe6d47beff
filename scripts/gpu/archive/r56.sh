#!/bin/bash
# Session 31, first measuring call. Before it, on the same machine: `mkdir -p /tmp/x && cp
# .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), `cp .gpu/w3a/* /tmp/x/` (carry .gpu/w3a), `cp
# .gpu/w3b/* /tmp/x/` (carry .gpu/w3b); this call carries .gpu/w2 .gpu/bin .gpu/tbin .gpu/kold
# (kernels/ as of a363d14). Both MLX wheels in; mlx-lm makes the shared checkpoint and starts its
# first process in the background (setsid, its own JIT cache in /tmp/ptx3), only to compile
# MLX's kernels, which took it 150-170 s in earlier sessions: its figures are not used. Meanwhile
# cohort's first bench-step fills cohort's empty JIT cache (saved at once), then the expert
# kernels' CUDA tests (both up-kernel layouts against float64, in the model against the ops route).
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
. scripts/gpu/wheel3.sh
. scripts/gpu/q36_arms.sh
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 5"
{
echo "=== make"
time (timeout 200 $PY scripts/gpu/q36_mlx_lm.py make --out $M 2>&1 | grep -v TMA | tail -3)
(export MLX_PTX_CACHE_DIR=/tmp/ptx3; mkdir -p /tmp/ptx3; setsid bash -c '. scripts/gpu/q36_arms.sh; mlx 420' > /tmp/mlx_warm.txt 2>&1 < /dev/null &)
echo "=== bench-step, empty JIT cache (mlx-lm compiling beside it: no figures kept)"
time (timeout 300 $B bench-step $S 2>&1 | grep -E "^\| B1 AR step|^\| B8 verify" | cut -c1-120)
save_ptx
echo "=== test moe_router (the expert kernel tests), one at a time, TF32 off"
(cd /tmp; MLX_ENABLE_TF32=0 timeout 170 /tmp/moe_router --test-threads=1 expert_kernels verify_sized 2>&1 | summary 12)
echo "=== mlx-lm warm-up so far"; tail -3 /tmp/mlx_warm.txt
} 2>&1 | tee $OUT/r56.txt
save_ptx
