#!/bin/bash
# cohort against mlx-lm on one checkpoint at the real Qwen3.6-35B-A3B geometry (issues 9, 10):
# mlx-lm makes it (random weights, its own quantization and layout, plus a random MTP sidecar),
# then mlx-lm and cohort run on it in turn, each in fresh processes, ABBA.
# Before this call: /tmp/x holds wheel.a (cohort's MLX CUDA 0.32.2 wheel, part 1) and w3.a (MLX
# CUDA 0.32.3, part 1, for mlx-lm, whose quantized MoE needs it) plus the .gpu/w3b files; this
# call carries .gpu/w2, .gpu/bin and .gpu/ptx. It runs the first half (mlx-lm, then cohort);
# r18.sh, called right after, the second (cohort, then mlx-lm) and the profiles.
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/wheel3.sh
. scripts/gpu/q36_arms.sh
{
echo "=== make"; $PY -c "import mlx.core as mx, mlx_lm; print(mx.__version__, mx.default_device())"
timeout 200 $PY scripts/gpu/q36_mlx_lm.py make --out $M 2>&1 | grep -v TMA | tail -3
du -sh $M; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
mlx; coh 1
} 2>&1 | tee $OUT/r17.txt
save_ptx
