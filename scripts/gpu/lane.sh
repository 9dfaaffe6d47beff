#!/bin/bash
# Continuous admission on the H200: `cohort bench --arrivals` on the default model, ARGS passed on
# (default: the three arms, two rounds). Needs, in /tmp/x from the calls before: the MLX CUDA
# wheel's two parts (wheel.a; wheel.b + wheel.sha256) and the default model's first part
# (smol.a); this call carries .gpu/m2 (smol.b + smol.sha256) and .gpu/bin (or they came earlier).
#   bash scripts/gpu/lane.sh [--arms continuous,power-of-two,sealed --rounds 2 ...]
set -u
mkdir -p /tmp/x
for d in .gpu/w2 .gpu/m2 .gpu/bin; do [ -d $d ] && cp -n $d/* /tmp/x/ 2>/dev/null; done
mkdir -p .gpu/w2 && cp -n /tmp/x/wheel.b /tmp/x/wheel.sha256 .gpu/w2/ 2>/dev/null
mkdir -p .gpu/bin && cp -n /tmp/x/cohort.xz .gpu/bin/ 2>/dev/null
. scripts/gpu/wheel.sh
cat /tmp/x/smol.a /tmp/x/smol.b > /tmp/smol.tar
echo "$(cat /tmp/x/smol.sha256)  /tmp/smol.tar" | sha256sum -c --quiet || exit 3
tar -xf /tmp/smol.tar -C /tmp
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--arms continuous,power-of-two,sealed --rounds 2)
{
$B --version
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 540 $B bench --arrivals -m /tmp/smol --receipt $OUT/arrivals.json "${args[@]}"
} 2>&1 | tee $OUT/lane.txt
