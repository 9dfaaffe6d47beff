# Sourced on the H200 after wheel.sh by the scripts that run mlx-lm (r17.sh, r33.sh): MLX CUDA
# 0.32.3 (mlx-lm's quantized MoE needs it) joined from the parts in /tmp/x, checked, and installed
# with the mlx and mlx-lm wheels into /tmp/site3; cohort keeps its 0.32.2 library in /tmp/site.
W3=/tmp/x/mlx_cuda_13-0.32.3-py3-none-manylinux_2_35_x86_64.whl
cat /tmp/x/w3.a /tmp/x/w3.b > $W3
echo "$(cat /tmp/x/w3.sha256)  $W3" | sha256sum -c --quiet || exit 4
python3 -m pip install -q --no-index --no-deps --target /tmp/site3 $W3 /tmp/x/mlx-0.32.3-*.whl /tmp/x/mlx_lm-*.whl 2>&1 | tail -2
