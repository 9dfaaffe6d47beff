# Sourced on the H200 by the scripts that need only the MLX CUDA wheel and the binary (the real
# geometry's random weights are made there): the wheel's first part was copied to /tmp/x/wheel.a
# by the call before (`mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/`), its second part with this
# call (carry .gpu/w2) or in one of its own (`cp .gpu/w2/* /tmp/x/`), and the binary with this
# call (carry .gpu/bin). MLX's CUDA kernel cache (compiled JIT modules) is seeded
# from .gpu/ptx when an earlier call brought one back, so a fresh machine skips those compiles.
. scripts/gpu/env.sh
W=/tmp/x/mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl
# The second part travels with this call, or came in a call of its own (then it is in /tmp/x).
if [ -f /tmp/x/wheel.b ]; then cp /tmp/x/wheel.b /tmp/x/wheel.sha256 /tmp/; else cp .gpu/w2/wheel.b .gpu/w2/wheel.sha256 /tmp/; fi
cat /tmp/x/wheel.a /tmp/wheel.b > $W
echo "$(cat /tmp/wheel.sha256)  $W" | sha256sum -c --quiet || exit 3
python3 -m pip install -q --no-index --no-deps --target /tmp/site $W 2>&1 | tail -2
xz -dc .gpu/bin/cohort.xz > $B && chmod +x $B
export MLX_PTX_CACHE_DIR=/tmp/ptx
mkdir -p $MLX_PTX_CACHE_DIR
if [ -f .gpu/ptx/ptx.tar.xz ]; then tar -xJf .gpu/ptx/ptx.tar.xz -C $MLX_PTX_CACHE_DIR; fi
echo "JIT cache: $(ls $MLX_PTX_CACHE_DIR | wc -l) files"
# Back to this machine at the end (at most 8 files of 16 MiB come back: one tar.xz, ~1.3 MB for
# the real geometry's 57 modules); copy it to .gpu/ptx/ for the next call.
save_ptx() { tar -cf - -C $MLX_PTX_CACHE_DIR . | xz -T16 > $OUT/ptx.tar.xz && echo "JIT cache out: $(ls $MLX_PTX_CACHE_DIR | wc -l) files"; }
