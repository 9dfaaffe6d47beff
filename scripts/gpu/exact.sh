#!/bin/bash
# The MTP cohort served exactly on the GPU (issue 41), on the default model with its trained head
# in bf16. Steps, in order, any of (default: all):
#   check  `cohort device --check-invariance`: the row-invariant kernels against float64 and
#          against themselves (each row alone, each verify query as a single step);
#   timei  `cohort device --time-invariance`: the real geometry's products through MLX's
#          quantized matmul and the invariant kernel (1, 2, 4 channels a warp), 1-16 rows;
#   probe  `cohort probe --time-routes 20`: which route the exactness gate keeps, the
#          construction check on it, and a B8 verify and step on it against the batched route,
#          in turns in one process;
#   synth  `cohort probe --synthetic qwen36-35b-a3b --layers 8`: the same at the real
#          geometry with random weights made on the machine;
#   cycle  `cohort bench-step --synthetic qwen36-35b-a3b --layers 8`: the engine's B8 MTP cycle
#          phase by phase at the real geometry on the route the gate keeps (invariant on CUDA);
#   cycleb the same with COHORT_MTP_ALLOW_INEXACT=1, so the batched route is timed beside it;
#   bench  `cohort bench` (8 marker prompts, seeds 4200-4207, paired rounds; MTP, served at the
#          width the construction check allows): serial against cohort, greedy and default.
#   envs   `cohort bench-step --synthetic qwen36-35b-a3b --layers $LAYERS (default 40) --iters 10`
#          once under each setting in $ENVS (space-separated; a setting is VAR=VALUE[,VAR=VALUE...]
#          or `default`), in order and then mirrored, one process each: library settings such as
#          MLX's MLX_MAX_OPS_PER_BUFFER / MLX_MAX_MB_PER_BUFFER (how often an evaluation hands its
#          CUDA graph to the device) timed side by side on one machine; $BSARGS adds bench-step
#          arguments to every arm (e.g. "--graph-stats --steps b1").
#   bins   the same bench-step once under each binary in $BINS (space-separated LABEL=PATH; a
#          PATH ending in .xz is unpacked first), in order and then mirrored: two builds side by
#          side on one machine (e.g. BINS="new=/tmp/cohort old=/tmp/x/old.xz").
#   checkm, probem, synthm, benchm: check, probe, synth and bench with COHORT_MMA_PRODUCTS=1 (the
#          invariant route's bf16 products on the tensor cores, kernels/affine_mma.cu). That is the
#          CUDA default since it was checked (docs/benchmarks.md), so the plain steps serve it too;
#          `COHORT_MMA_PRODUCTS=0 bash scripts/gpu/exact.sh ...` times the scalar kernel.
# Same calls as lane.sh; this call must also carry .gpu/bin/mtp.safetensors (the trained head).
#   bash scripts/gpu/exact.sh [check] [probe] [synth] [bench]
set -u
. scripts/gpu/smol.sh
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(check probe bench)
{
$B --version
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
for step in "${steps[@]}"; do
  echo "== $step"
  case $step in
    check) timeout 200 $B device --check-invariance ;;
    timei) timeout 200 $B device --time-invariance ;;
    probe) timeout 200 $B probe -m /tmp/smol --time-routes 20 ;;
    synth) timeout 300 $B probe --synthetic qwen36-35b-a3b --layers 8 --time-routes 10 ;;
    cycle) timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers 8 --iters 10 ;;
    cycleb) COHORT_MTP_ALLOW_INEXACT=1 timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers 8 --iters 10 ;;
    bench) timeout 400 $B bench -m /tmp/smol --generation-mode mtp --rounds 2 --receipt $OUT/bench.json ;;
    envs)
      read -ra arms <<< "${ENVS:-default}"
      order=("${arms[@]}")
      for ((i = ${#arms[@]} - 1; i >= 0; i--)); do order+=("${arms[i]}"); done
      for arm in "${order[@]}"; do
        echo "-- $arm"
        (
          [ "$arm" = default ] || for kv in ${arm//,/ }; do export "$kv"; done
          timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers "${LAYERS:-40}" --iters 10 ${BSARGS:-}
        )
      done ;;
    bins)
      read -ra arms <<< "${BINS:-new=$B}"
      order=("${arms[@]}")
      for ((i = ${#arms[@]} - 1; i >= 0; i--)); do order+=("${arms[i]}"); done
      for arm in "${order[@]}"; do
        label=${arm%%=*} bin=${arm#*=}
        if [ "${bin%.xz}" != "$bin" ]; then
          [ -x "/tmp/bin_$label" ] || { xz -dc "$bin" > "/tmp/bin_$label" && chmod +x "/tmp/bin_$label"; }
          bin=/tmp/bin_$label
        fi
        echo "-- $label ($bin)"
        timeout 300 "$bin" bench-step --synthetic qwen36-35b-a3b --layers "${LAYERS:-40}" --iters 10 ${BSARGS:-}
      done ;;
    checkm) COHORT_MMA_PRODUCTS=1 timeout 200 $B device --check-invariance ;;
    probem) COHORT_MMA_PRODUCTS=1 timeout 200 $B probe -m /tmp/smol --time-routes 20 ;;
    synthm) COHORT_MMA_PRODUCTS=1 timeout 300 $B probe --synthetic qwen36-35b-a3b --layers 8 --time-routes 10 ;;
    benchm) COHORT_MMA_PRODUCTS=1 timeout 400 $B bench -m /tmp/smol --generation-mode mtp --rounds 2 --receipt $OUT/benchm.json ;;
    *) echo "unknown step $step" ;;
  esac
done
} 2>&1 | tee $OUT/exact.txt
save_ptx
