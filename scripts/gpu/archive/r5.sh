#!/bin/bash
# The default model (unpacked by r4.sh) against mlx-lm on the same checkpoint, one process,
# ABBA: B1 and a batch of 8, AR and (with the shipped head) MTP.
set -u
. scripts/gpu/env.sh
M=/tmp/x/smol
cp assets/smollm2-135m-instruct.mtp.safetensors $M/mtp.safetensors
COHORT_MTP_ALLOW_INEXACT=1 timeout 560 python3 scripts/bench_vs_mlx_lm.py --model $M --keep-dtype --rounds 2 --batch 8 --binary $B 2>&1 | grep -v TMA | tail -24
