#!/bin/bash
# Call 5: the real Qwen3.6-35B-A3B geometry, fused Gated DeltaNet kernel against the plain-ops loop.
set -u
. scripts/gpu/env.sh
timeout 570 $B bench-step --synthetic qwen36-35b-a3b --prefill 2048 --iters 20 --gdn-routes kernel,ops --json $OUT/step.json 2>&1 | grep -v TMA | tail -45
