#!/bin/bash
# Session 30, second machine, first measuring call. Before it, on the same machine:
# `mkdir -p /tmp/x && cp .gpu/w1/wheel.a /tmp/x/` (carry .gpu/w1); this call carries .gpu/w2
# .gpu/bin .gpu/tbin .gpu/ptx .gpu/kold (kernels/ as of 3409df1). The expert kernels with several
# channels a warp for blocks of more than two tokens: their CUDA tests (against float64, and
# against the ops route inside the model), the model against mlx-lm, then device time by ncu:
# the verify with the kernels forced on (new and 3409df1's) and with the default route, and B1
# (new and old).
set -u
. scripts/gpu/wheel.sh
. scripts/gpu/test_bins.sh
{
echo "=== test moe_router (the expert kernel tests), one at a time, TF32 off"
(cd /tmp; MLX_ENABLE_TF32=0 timeout 200 /tmp/moe_router --test-threads=1 expert_kernels verify_sized 2>&1 | summary 12)
cuda_test qwen35_reference 100
} 2>&1 | tee $OUT/r51.txt
export NCU_ROWS=9; . scripts/gpu/ncu_arm.sh
NEW=COHORT_KERNEL_DIR=$PWD/kernels OLD=COHORT_KERNEL_DIR=$PWD/.gpu/kold
{
arm verify_experts_new verify COHORT_MOE_KERNEL=1 $NEW
arm verify_experts_old verify COHORT_MOE_KERNEL=1 $OLD
arm verify_default verify $NEW
arm ar_experts_new ar COHORT_MOE_KERNEL=1 $NEW
arm b1_new b1 $NEW
arm b1_old b1 $OLD
} 2>&1 | tee -a $OUT/r51.txt
tar -cJf $OUT/ncu51.tar.xz -C /tmp $(cd /tmp; ls ncu_*.csv)
save_ptx
