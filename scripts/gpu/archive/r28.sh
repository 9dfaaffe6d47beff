#!/bin/bash
# Why the 4-bit MoE fixture's logits change from run to run on MLX CUDA (docs/benchmarks.md, "A
# correctness finding on MLX CUDA"), whether the kernels the real geometry uses are sound, and
# the new expert kernels' float64 check. Most telling first, since a call stops at 600 s (what
# was printed still comes back):
# 1. the qwen35_reference binary's first test (the MoE fixture comes first) with every CUDA-only
#    route off, twice (the first run also fills MLX's JIT cache);
# 2. (last, being slowest) the same under compute-sanitizer: memcheck (out-of-bounds and
#    misaligned accesses) by default, racecheck (shared-memory hazards, the known failure of
#    pipelined quantized matmul kernels) and initcheck when SAN_TOOLS names them; each names
#    the kernel;
# 3. device --check-kernels: gather_qmm in both forms, the plain products at fixture and real
#    sizes in float32 and bf16, and the expert kernels, each against float64 and repeated for
#    bitwise equality;
# 4. the fixture through the expert kernels (COHORT_MOE_KERNEL=1), which replace most of the
#    MoE block's MLX products: if MLX's products at the fixture's sizes are the fault, this passes;
# 5. float32 matmuls kept off TF32 (MLX_ENABLE_TF32=0) for the fixture and for kv_slots (whose
#    steady 2.5e-4 looked like TF32), initcheck, and the gdn_kernel / moe_router test binaries.
# Calls (here first: bash scripts/gpu/prepare.sh qwen35_reference kv_slots gdn_kernel moe_router):
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
sanitize() {
  echo "=== compute-sanitizer --tool $1, routes off"
  (cd /tmp; env $OFF timeout $2 $SAN --tool $1 --print-limit 12 --show-backtrace no \
    /tmp/qwen35_reference $TEST > /tmp/san_$1.txt 2>&1; echo "exit $?")
  summary 40 < /tmp/san_$1.txt
  cp /tmp/san_$1.txt $OUT/
}
{
echo "=== compute-sanitizer: ${SAN:-none}"
echo "=== qwen35_reference, every CUDA-only route off, two runs"
for i in 1 2; do (cd /tmp; env $OFF timeout 120 /tmp/qwen35_reference $TEST 2>&1 | summary 4); done
echo "=== device --check-kernels"
timeout 120 $B device --check-kernels 2>&1 | grep -vE "TMA|^Ops|^Kernel"
echo "=== qwen35_reference with COHORT_MOE_KERNEL=1 (stacking and kernels on)"
(cd /tmp; COHORT_MOE_KERNEL=1 timeout 60 /tmp/qwen35_reference $TEST 2>&1 | summary 4)
echo "=== qwen35_reference, routes off, MLX_ENABLE_TF32=0"
(cd /tmp; env $OFF MLX_ENABLE_TF32=0 timeout 60 /tmp/qwen35_reference $TEST 2>&1 | summary 4)
echo "=== kv_slots with MLX_ENABLE_TF32=0"
(cd /tmp; MLX_ENABLE_TF32=0 timeout 60 /tmp/kv_slots --test-threads=1 2>&1 | summary 8)
for t in gdn_kernel moe_router; do
  echo "=== test $t (MLX CUDA)"
  (cd /tmp; MLX_ENABLE_TF32=0 timeout 60 /tmp/$t --test-threads=1 2>&1 | grep -vE "TMA|^$" | tail -10)
done
# Sanitizers last: they are the slowest, and a call stops at 600 s (SAN_TOOLS picks them).
if [ -n "$SAN" ]; then for tool in ${SAN_TOOLS:-memcheck}; do sanitize $tool 120; done; fi
} 2>&1 | tee $OUT/r28.txt
save_ptx
