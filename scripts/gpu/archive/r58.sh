#!/bin/bash
# Session 31, right after r57.sh (no carry). r57's fresh processes overlapped mlx-lm's
# background warm-up from r56 (still compiling), so its figures are discarded: once that process
# is done, fresh processes again (NEW, OLD, CVT, NEW as in r57.sh), then device time by ncu over
# one verify and one B8 AR step for the same arms.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
for i in $(seq 24); do pgrep -f q36_mlx_lm > /dev/null || break; sleep 5; done
echo "=== mlx-lm warm-up (still running: $(pgrep -fc q36_mlx_lm))"; tail -3 /tmp/mlx_warm.txt
S="--synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 512 --compiled all --iters 15"
NEW="COHORT_KERNEL_DIR=$PWD/kernels"
OLD="COHORT_KERNEL_DIR=$PWD/.gpu/kold COHORT_MOE_GROUPED=0"
CVT="COHORT_KERNEL_DIR=$PWD/kernels COHORT_MOE_GROUPED=0"
fig() { grep -vE "^  \[|TMA" | grep -E "^\| B|tok/s|bandwidth \(|handed|acceptance 0.6" | cut -c1-160; }
{
for k in NEW OLD CVT NEW OLD; do
  echo "=== bench-step, $k: ${!k}"
  env ${!k} timeout 50 $B bench-step $S 2>&1 | fig
done
export NCU_ROWS=7; . scripts/gpu/ncu_arm.sh
arm verify_new verify $NEW
arm verify_cvt verify $CVT
arm verify_old verify $OLD
arm ar_new ar $NEW
arm ar_old ar $OLD
} 2>&1 | tee $OUT/r58.txt
tar -cJf $OUT/ncu58.tar.xz -C /tmp $(cd /tmp; ls ncu_*.csv)
