#!/bin/bash
# The second half of r17.sh's side by side (cohort, then mlx-lm: ABBA with r17's mlx-lm, cohort),
# then where a step's time goes: Nsight Systems traces of cohort's B1 steps alone and of its B8
# cycles alone (`bench-step --steps`), kernels and CUDA API calls summed (issue 9's profile).
# Runs right after r17.sh, on what it left in /tmp (the libraries, the binary, the checkpoint).
set -u
. scripts/gpu/env.sh
export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/q36_arms.sh
{
coh 2; mlx
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "=== nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  for s in b1 b8; do
    timeout 120 $NSYS profile -t cuda --cuda-graph-trace=node -o /tmp/prof_$s --force-overwrite true \
      $B bench-step -m $M --gdn-routes kernel --prefill 64 --iters 40 --compiled all --steps $s 2>&1 | grep -E "^\| B|graph built|nsys-rep" | head -8
    timeout 90 $NSYS stats -q -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_trace -f csv -o /tmp/st_$s /tmp/prof_$s.nsys-rep > /dev/null 2>&1
    ls /tmp/st_${s}_* 2>/dev/null
    for f in /tmp/st_${s}_*.csv; do xz -T16 -c $f > $OUT/$(basename $f).xz; done
  done
fi
} 2>&1 | tee $OUT/r18.txt
tar -cf - -C $MLX_PTX_CACHE_DIR . | xz -T16 > $OUT/ptx.tar.xz
