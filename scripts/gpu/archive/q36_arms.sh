# Sourced by r17.sh and r18.sh: the two arms that take turns on the shared checkpoint at $M.
PY="env LD_LIBRARY_PATH=/tmp/site3/mlx/lib:$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib PYTHONPATH=/tmp/site3 python3"
M=/tmp/q36
# mlx-lm's arm; its time limit in seconds is the argument (150 unless given).
mlx() { echo "=== mlx-lm"; timeout ${1:-150} $PY scripts/gpu/q36_mlx_lm.py bench --model $M --prompt 512 --gen 64 --rounds 2 2>&1 | grep -v TMA | tail -3; }
coh() { echo "=== cohort"; timeout 150 $B bench-step -m $M --gdn-routes kernel --prefill 512 --iters 30 --compiled none,all --interleave-b1 --json $OUT/cohort_$1.json 2>/dev/null | grep -vE "^  \[" ; }
# cohort on the shared checkpoint in one fresh process with the environment given (r33-r34):
# compiled blocks only, one line of figures per step.
coh_env() { echo "=== cohort, $*"; env "$@" timeout 200 $B bench-step -m $M --gdn-routes kernel --prefill 512 --iters 30 --compiled all --graph-stats 2>&1 | grep -vE "^  \[|TMA" | cut -c1-300; }
