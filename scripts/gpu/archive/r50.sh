#!/bin/bash
# Session 30, right after r49 on what it left in /tmp (carry .gpu/kold, the kernels as of the
# commit before this session's): where the device time goes, with the mixer norm folded and
# not, with the mixer front's convolutions shared out in shared memory (kernels/, new) and not
# (.gpu/kold), and with the expert kernels forced at the verify's 16 tokens. Each arm is one
# step bracketed by bench-step --profile-step for ncu (see r29.sh), summed by kernel. STEPS picks
# verify (default) or b1.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/ncu_arm.sh
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
