#!/bin/bash
# Session 30, right after r51 on what it left in /tmp (no carry): the expert kernels forced on
# for every block and off, side by side in one process (B1 steps, and B8 cycles + AR steps on one
# cohort of rows), with this commit's kernels.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all"
{
echo "=== cohort, interleaved B1 and B8, expert kernels on (every block) and off"
timeout 300 $B bench-step $S --steps b1 --interleave-b1 --interleave-b8 --experts-kernel on,off --iters 40 2>&1 | grep -vE "^  \[|TMA" | tail -24
} 2>&1 | tee $OUT/r52.txt
tar -cf - -C $MLX_PTX_CACHE_DIR . | xz -T16 > $OUT/ptx.tar.xz
