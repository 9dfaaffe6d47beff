#!/bin/bash
# Session 31, meant for right after r58.sh (no carry): ncu over the arms r58 left out (the B8 AR
# step with this commit's codes on the per-pair up kernel; B1 new and old), then cohort against
# mlx-lm on the shared checkpoint r56 made (mlx-lm compiled its kernels in r56's background
# process, its cache in /tmp/ptx3): cohort, mlx-lm, cohort. As run it gave nothing: the machine
# had been given back after r58, so it found a fresh one with nothing of r56-r58 left in /tmp.
# r60.sh and r61.sh redid the mlx-lm side by side.
set -u
. scripts/gpu/env.sh; export MLX_PTX_CACHE_DIR=/tmp/ptx
. scripts/gpu/q36_arms.sh
export NCU_ROWS=6; . scripts/gpu/ncu_arm.sh
OLD="COHORT_KERNEL_DIR=$PWD/.gpu/kold COHORT_MOE_GROUPED=0"
CVT="COHORT_KERNEL_DIR=$PWD/kernels COHORT_MOE_GROUPED=0"
{
arm ar_cvt ar $CVT
arm b1_cvt b1 $CVT
arm b1_old b1 $OLD
} 2>&1 | tee $OUT/r59.txt
tar -cJf $OUT/ncu59.tar.xz -C /tmp $(cd /tmp; ls ncu_ar_cvt.csv ncu_b1_*.csv)
{
coh_env COHORT_MOE_GROUPED=0 | grep -vE "^graph of|^measuring"
(export MLX_PTX_CACHE_DIR=/tmp/ptx3; time mlx 200)
coh_env COHORT_MOE_GROUPED=0 | grep -vE "^graph of|^measuring|^geometry"
} 2>&1 | tee -a $OUT/r59.txt
