# Sourced on the H200: the CUDA MLX library from the wheel in /tmp/site, the NVIDIA pip libraries.
SP=/opt/torch/.venv/lib/python3.12/site-packages
export LD_LIBRARY_PATH=/tmp/site/mlx/lib:$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib
export CUDA_HOME=/usr/local/cuda COHORT_HOME=/tmp/ch PYTHONPATH=/tmp/site
B=/tmp/cohort
export COHORT_KERNEL_DIR=${COHORT_KERNEL_DIR:-$PWD/crates/core/src/model/cuda}
