# Sourced by exact.sh's peerprep and peers steps: mlx-lm's Python on MLX CUDA 0.32.3 (its
# quantized MoE needs it) from /tmp/site3, with its own JIT cache; cohort keeps 0.32.2 in /tmp/site.
SP=/opt/torch/.venv/lib/python3.12/site-packages
PY="env LD_LIBRARY_PATH=/tmp/site3/mlx/lib:$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib PYTHONPATH=/tmp/site3 MLX_PTX_CACHE_DIR=/tmp/ptx3 python3"
