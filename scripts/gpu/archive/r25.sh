#!/bin/bash
# The full bench-step figures at the real geometry with session 23's kernels and stacking on (the
# engine's CUDA defaults): B1, B8 draft / verify / AR, each against its floor, and graph sizes.
# Runs right after r24 on what it left in /tmp (no carry), or after `cp .gpu/w1/wheel.a /tmp/x/`
# with .gpu/w2, .gpu/bin, .gpu/ptx. First the compiled_blocks test binary r24 unpacked, when there
# (TEST_S seconds; PROCESSES bench-step processes).
set -u
if [ -x /tmp/cohort ] && [ -d /tmp/site/mlx ]; then . scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx; else . scripts/gpu/wheel.sh; fi
mkdir -p /work && ln -sfn $PWD /work/main
{
if [ -f /tmp/compiled_blocks ]; then
  echo "=== test compiled_blocks (MLX CUDA, the fused kernels and stacking on)"
  timeout ${TEST_S:-300} /tmp/compiled_blocks 2>&1 | grep -vE "TMA|^$" | tail -12
fi
for i in $(seq ${PROCESSES:-2}); do
  echo "=== process $i"
  timeout 250 $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --iters 20 \
    --compiled all --graph-stats --json $OUT/r25_$i.json 2>&1 | grep -vE "^  \[|TMA"
done
} 2>&1 | tee $OUT/r25.txt
save_ptx() { tar -cf - -C $MLX_PTX_CACHE_DIR . | xz -T16 > $OUT/ptx.tar.xz; }
save_ptx
