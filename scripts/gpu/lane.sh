#!/bin/bash
# Continuous admission on the GPU: `cohort-lab bench --arrivals` on the default model, ARGS passed on
# (default: the three arms, two rounds). Needs, in /tmp/x from the calls before: the MLX CUDA
# wheel's two parts (wheel.a; wheel.b + wheel.sha256) and the default model's first part
# (smol.a); this call carries .gpu/m2 (smol.b + smol.sha256) and .gpu/bin (or they came earlier).
#   bash scripts/gpu/lane.sh [--arms continuous,power-of-two,sealed --rounds 2 ...]
set -u
. scripts/gpu/smol.sh
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--arms continuous,power-of-two,sealed --rounds 2)
{
$B --version
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 540 $B bench --arrivals -m /tmp/smol --receipt $OUT/arrivals.json "${args[@]}"
} 2>&1 | tee $OUT/lane.txt
