#!/bin/bash
# Why the 4-bit MoE fixture's logits change from run to run on MLX CUDA (docs/benchmarks.md, "A
# correctness finding on MLX CUDA"), and whether the kernels the real geometry uses are sound:
# 1. the qwen35_reference binary's first test (the MoE fixture comes first) with every CUDA-only
#    route off, plain and under compute-sanitizer: memcheck (out-of-bounds and misaligned
#    accesses), racecheck (shared-memory hazards, the known failure of pipelined quantized matmul
#    kernels), initcheck (reads of never-written device memory); each names the kernel;
# 2. the same with float32 matmuls kept off TF32 (MLX_ENABLE_TF32=0), which separates a
#    precision effect from a fault, and kv_slots the same way (its 2.5e-4 looked like TF32);
# 3. device --check-kernels: gather_qmm in both forms and the plain products at fixture and real
#    sizes in float32 and bf16, each against float64 and repeated for bitwise equality.
# Calls (prepare.sh qwen35_reference kv_slots gdn_kernel moe_router, here, first):
#   mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/      (carry .gpu/w1)
#   cp .gpu/w2/* /tmp/x/                                (carry .gpu/w2)
#   bash scripts/gpu/r28.sh                             (carry .gpu/bin .gpu/tbin .gpu/ptx)
set -u
. scripts/gpu/wheel.sh
mkdir -p /work && ln -sfn $PWD /work/main
export COHORT_REQUIRE_CUDA=1
OFF="COHORT_GDN_KERNEL=0 COHORT_ROUTER_KERNEL=0 COHORT_COMPILE_MOE=0 COHORT_COMPILE_GDN=0 COHORT_STACK_PROJECTIONS=0"
for t in qwen35_reference kv_slots gdn_kernel moe_router; do
  [ -f .gpu/tbin/$t.xz ] && xz -dc .gpu/tbin/$t.xz > /tmp/$t && chmod +x /tmp/$t
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | head -1)
TEST="last_position_logits_match_mlx_lm --exact --test-threads=1"
summary() { grep -E "^test |panicked|differ|rror|test result|Invalid|Race|Hazard|Uninitialized|at 0x|in .*kernel|SUMMARY" | grep -v backtrace | head -${1:-12}; }
{
echo "=== compute-sanitizer: ${SAN:-none}"
echo "=== qwen35_reference, every CUDA-only route off, three plain runs"
for i in 1 2 3; do (cd /tmp; env $OFF timeout 100 /tmp/qwen35_reference $TEST 2>&1 | summary 4); done
echo "=== the same with MLX_ENABLE_TF32=0"
(cd /tmp; env $OFF MLX_ENABLE_TF32=0 timeout 100 /tmp/qwen35_reference $TEST 2>&1 | summary 4)
echo "=== kv_slots with MLX_ENABLE_TF32=0"
(cd /tmp; MLX_ENABLE_TF32=0 timeout 100 /tmp/kv_slots --test-threads=1 2>&1 | summary 8)
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck initcheck; do
    echo "=== compute-sanitizer --tool $tool, routes off"
    (cd /tmp; env $OFF timeout 150 $SAN --tool $tool --print-limit 12 --show-backtrace no \
      /tmp/qwen35_reference $TEST > /tmp/san_$tool.txt 2>&1; echo "exit $?")
    summary 40 < /tmp/san_$tool.txt
    cp /tmp/san_$tool.txt $OUT/
  done
fi
echo "=== device --check-kernels"
timeout 150 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel"
for t in gdn_kernel moe_router; do
  echo "=== test $t (MLX CUDA)"
  (cd /tmp; timeout 120 /tmp/$t 2>&1 | grep -vE "TMA|^$" | tail -8)
done
} 2>&1 | tee $OUT/r28.txt
save_ptx
