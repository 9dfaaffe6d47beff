#!/bin/bash
# The Qwen3.5 fixtures against mlx-lm's logits on MLX CUDA: the qwen35_reference and kv_slots
# test binaries (built here, `cargo test --release --no-run`) with every CUDA-only route off
# (plain ops, nothing stacked or compiled, no custom kernel) and with the engine's CUDA defaults.
# Calls: `cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1), then this (carry .gpu/w2, .gpu/bin,
# .gpu/tbin, .gpu/ptx).
set -u
. scripts/gpu/wheel.sh
mkdir -p /work && ln -sfn $PWD /work/main
OFF="COHORT_GDN_KERNEL=0 COHORT_ROUTER_KERNEL=0 COHORT_COMPILE_MOE=0 COHORT_COMPILE_GDN=0 COHORT_STACK_PROJECTIONS=0"
for t in qwen35_reference kv_slots; do xz -dc .gpu/tbin/$t.xz > /tmp/$t && chmod +x /tmp/$t; done
run() { (cd /tmp; env $2 timeout 170 /tmp/$1 --test-threads=1 > /tmp/p_$1_$3.txt 2>&1) & }
run qwen35_reference "$OFF" off; run qwen35_reference "X=1" on; run kv_slots "$OFF" off; run kv_slots "X=1" on
wait
{
for f in /tmp/p_*.txt; do echo "== $f"; grep -E "^test |panicked|differ|error|test result" $f | grep -v backtrace | head -14; done
} 2>&1 | tee $OUT/r26.txt
