# Sourced on the H200 (after env.sh or wheel.sh) by the scripts that time one step's kernels
# (r50.sh, r51.sh): `arm NAME STEP [VAR=VALUE ...]` runs bench-step at the real geometry with
# that step (b1, draft, verify, ar) bracketed for Nsight Compute (ncu --profile-from-start off),
# with the variables set, and prints its kernels summed by family (ncu_summary.py, top rows).
# NCU_ROWS sets how many rows; the raw CSV stays in /tmp/ncu_NAME.csv.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu 2>/dev/null | head -1)
arm() {
  local name=$1 s=$2; shift 2
  local steps=b8; [ $s = b1 ] && steps=b1
  echo "=== $name ($s; $*)"
  env "$@" timeout 110 $NCU --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base --log-file /tmp/ncu_$name.csv \
    $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 64 --iters 2 --compiled all \
    --steps $steps --profile-step $s 2>&1 | grep -E "rror" | head -4
  python3 scripts/gpu/ncu_summary.py /tmp/ncu_$name.csv "$name" 2>/dev/null | head -${NCU_ROWS:-16}
}
