#!/bin/bash
# Session 30, right after r49 on what it left in /tmp (carry .gpu/kold, the kernels as of the
# commit before this session's): where the device time goes, with the mixer norm folded and
# not, with the mixer front's convolutions shared out in shared memory (kernels/, new) and not
# (.gpu/kold), and with the expert kernels forced at the verify's 16 tokens. Each arm is one
# step bracketed by bench-step --profile-step for ncu (see r29.sh), summed by kernel. STEPS picks
# verify (default) or b1.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu 2>/dev/null | head -1)
arm() { # name, step, extra env...
  local name=$1 s=$2; shift 2
  local steps=b8; [ $s = b1 ] && steps=b1
  echo "=== $name ($s; $*)"
  env "$@" timeout 110 $NCU --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base --log-file /tmp/ncu_$name.csv \
    $B bench-step --synthetic qwen36-35b-a3b --gdn-routes kernel --prefill 64 --iters 2 --compiled all \
    --steps $steps --profile-step $s 2>&1 | grep -E "^\| B|rror" | head -8
  python3 scripts/gpu/ncu_summary.py /tmp/ncu_$name.csv "$name" | head -16
}
NEW=COHORT_KERNEL_DIR=$PWD/kernels OLD=COHORT_KERNEL_DIR=$PWD/.gpu/kold
S=${STEPS:-verify}
{
echo "=== ncu: ${NCU:-none}"
arm ${S}_norm_new $S COHORT_GDN_FUSED_NORM=1 $NEW
arm ${S}_norm_old $S COHORT_GDN_FUSED_NORM=1 $OLD
arm ${S}_plain_new $S COHORT_GDN_FUSED_NORM=0 $NEW
arm ${S}_plain_old $S COHORT_GDN_FUSED_NORM=0 $OLD
[ $S = verify ] && arm verify_experts verify COHORT_GDN_FUSED_NORM=1 COHORT_MOE_KERNEL=1 $NEW
} 2>&1 | tee $OUT/r50_$S.txt
tar -cJf $OUT/ncu_$S.tar.xz -C /tmp $(cd /tmp; ls ncu_*.csv)
tar -cf - -C $MLX_PTX_CACHE_DIR . | xz -T16 > $OUT/ptx.tar.xz
