#!/bin/bash
# Unpack the bundle (MLX CUDA and Python wheels, the default model, the binary) sent in parts to
# /tmp/x, then batched cohort attention at the real Qwen3.6-35B-A3B geometry: one masked attention
# over the packed rows against one chain per row (ABBA), fused GDN kernel, in one process.
set -u
. scripts/gpu/env.sh
X=/tmp/x
cat $X/bundle.part.* > $X/bundle.tar
echo "$(cat $X/bundle.sha256)  $X/bundle.tar" | sha256sum -c || exit 3
tar -xf $X/bundle.tar -C $X
python3 -m pip install -q --no-index --no-deps --target /tmp/site $X/mlx_cuda_13-*.whl $X/mlx-0.32.2-*.whl $X/mlx_lm-*.whl 2>&1 | tail -2
cp $X/cohort $B && chmod +x $B
$B --version
timeout 500 $B bench-step --synthetic qwen36-35b-a3b --prefill 1024 --iters 10 --gdn-routes kernel --attention batched,rows,rows,batched --json $OUT/step.json 2>&1 | grep -v TMA | tail -80
