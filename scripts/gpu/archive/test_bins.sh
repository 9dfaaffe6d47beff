# Sourced on the H200 by the scripts that run the CUDA test binaries (after wheel.sh): the tree
# where the tests look for fixtures, CUDA-only skips turned into failures, the binaries that
# prepare.sh packed (qwen35_reference gdn_kernel moe_router add_norm attention_kernel) unpacked
# into /tmp.
mkdir -p /work && ln -sfn $PWD /work/main
export COHORT_REQUIRE_CUDA=1
for t in qwen35_reference gdn_kernel moe_router add_norm attention_kernel; do
  [ -f .gpu/tbin/$t.xz ] && xz -dc .gpu/tbin/$t.xz > /tmp/$t && chmod +x /tmp/$t
done
summary() { grep -E "^test |panicked|differ|rror|test result" | grep -v backtrace | head -${1:-12}; }
# One test binary, one test at a time (several MLX CUDA threads at once hung moe_router), with
# float32 matmuls off TF32 (MLX CUDA's default rounds them beyond the float tests' 1e-4).
cuda_test() {
  echo "=== test $1, one at a time, TF32 off"
  (cd /tmp; MLX_ENABLE_TF32=0 timeout $2 /tmp/$1 --test-threads=1 2>&1 | summary 12)
}
