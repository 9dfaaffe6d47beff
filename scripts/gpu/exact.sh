#!/bin/bash
# The MTP cohort served exactly on the GPU (issue 41), on the default model with its trained head
# in bf16. Steps, in order, any of (default: all):
#   check  `cohort-lab device --check-invariance`: the row-invariant kernels against float64 and
#          against themselves (each row alone, each verify query as a single step), and the MoE
#          router and expert kernels against each token alone;
#   checkk `cohort-lab device --check-kernels` (within $CHECKK_S s, default 560): every CUDA kernel
#          (the recurrence, the MoE expert kernels scalar and on tensor cores, the router,
#          attention), then MLX's own products, against float64;
#   timei  `cohort-lab device --time-invariance`: the real geometry's products through MLX's
#          quantized matmul and the invariant kernel (1, 2, 4 channels a warp), 1-16 rows, then
#          the MoE expert kernels with the up kernel scalar and on tensor cores, 1-16 tokens;
#          once under each kernel folder in $KDIRS (space-separated; default the tree's), so
#          kernel variants are timed side by side in one call;
#   timem  `cohort-lab device --time-moe`: timei's MoE expert table alone, a process a folder in
#          $KDIRS, in order and then mirrored (seconds each: kernel variants side by side);
#   probe  `cohort-lab probe --time-routes 20`: which route the exactness gate keeps, the
#          construction check on it, and a B8 verify and step on it against the batched route,
#          in turns in one process;
#   synth  `cohort-lab probe --synthetic qwen36-35b-a3b --layers 8`: the same at the real
#          geometry with random weights made on the machine;
#   cycle  `cohort-lab bench-step --synthetic qwen36-35b-a3b --layers 8`: the engine's B8 MTP cycle
#          phase by phase at the real geometry on the route the gate keeps (invariant on CUDA);
#   cycleb the same with COHORT_MTP_ALLOW_INEXACT=1, so the batched route is timed beside it;
#   bench  `cohort-lab bench` (8 marker prompts, seeds 4200-4207, paired rounds; MTP, served at the
#          width the construction check allows): serial against cohort, greedy and default.
#   reads  `cohort generate -m /tmp/smol`: a $READ_LEN-token prompt (default 2000), then the same
#          with 24 tokens more 3 s later (from the prompt cache), once under each setting in
#          $ENVS (default: the invariant route's pieces against COHORT_PROMPT_PIECES=0), mirrored:
#          each turn's tokens reused, read time and time to first token (issue 54);
#   chat   `cohort serve -m /tmp/smol` in chat_bench.py's scenarios (a 9-turn chat, a paste and
#          three follow-ups): follow-ups' time to first token with and without the prompt cache,
#          and mlx_lm.server on MLX CUDA with "mlx_lm.server" in $CHAT_ARMS (wheels as peerprep's);
#          $CHAT_ROUNDS, $CHAT_ANSWER, $CHAT_THINK, $CHAT_SCENARIOS; the table to $OUT/chat/;
#   envs   `cohort-lab bench-step --synthetic qwen36-35b-a3b --layers $LAYERS (default 40) --iters 10`
#          once under each setting in $ENVS (space-separated; a setting is VAR=VALUE[,VAR=VALUE...]
#          or `default`), in order and then mirrored, one process each: library settings such as
#          MLX's MLX_MAX_OPS_PER_BUFFER / MLX_MAX_MB_PER_BUFFER (how often an evaluation hands its
#          CUDA graph to the device) timed side by side on one machine; $BSARGS adds bench-step
#          arguments to every arm (e.g. "--graph-stats --steps b1").
#   bins   the same bench-step once under each binary in $BINS (space-separated LABEL=PATH; a
#          PATH ending in .xz is unpacked first), in order and then mirrored: two builds side by
#          side on one machine (e.g. BINS="new=/tmp/cohort old=/tmp/x/old.xz"), each with the kernels
#          built into it.
#   ncu    one step of bench-step at the real geometry ($LAYERS layers, default 40) under Nsight
#          Compute (`--profile-step $NCU_STEP`, default b1; b1, draft, verify or ar) after a prefill
#          of $PREFILL tokens (default 64), its kernels' device time summed by family
#          (ncu_summary.py, $NCU_ROWS rows); raw CSV to $OUT as ncu_<step>_p<prefill>.csv.
#   ncuk   the kernels whose names match $NCU_KERNEL (a regex, default moe_experts_up) in one
#          bench-step step ($NCU_STEP, default verify) under Nsight Compute's full set of
#          sections (throughput, occupancy, memory, warp stalls), two launches; the report to
#          $OUT/ncuk.txt, its headline rows shown.
#   peerprep  mlx-lm's side (calls carrying .gpu/w3a and .gpu/w3b first put w3.a, w3.b, w3.sha256
#          and the mlx, mlx-lm wheels in /tmp/x): MLX CUDA 0.32.3, mlx and mlx-lm into
#          /tmp/site3; then, in the background, mlx-lm makes the shared checkpoint /tmp/q36
#          (q36_mlx_lm.py make) and runs one round to compile MLX's kernels into its own JIT
#          cache (/tmp/ptx3, seeded from .gpu/ptx3/ptx3.tar.xz when carried). Later steps run
#          beside it; `peers` waits for it.
#   peers  cohort against mlx-lm on that checkpoint, fresh processes back to back ($PEER_ARMS,
#          default "cohort mlx-lm cohort"; $PEER_ROUNDS mlx-lm rounds a process, default 3);
#          writes mlx-lm's JIT cache to $OUT/ptx3.tar.xz (keep it in .gpu/ptx3/).
#   tests  each test binary this call carries in .gpu/tbin (`prepare.sh kernels engine` makes
#          the area binaries; set $TESTS, e.g. "cuda", or their CPU tests run too), one test at a time, the CUDA-only ones included (they are
#          #[ignore]d elsewhere, and fail here on a wrong backend) and TF32 off, within $TEST_S s each (default 300); $TESTS filters them by
#          name (default all); each binary's lines to $OUT/test_<name>.txt.
#   checkm, probem, synthm, benchm: check, probe, synth and bench with COHORT_MMA_PRODUCTS=1 (the
#          invariant route's bf16 products on the tensor cores, crates/core/src/model/cuda/affine_mma.cu). That is the
#          CUDA default since it was checked (docs/benchmarks.md), so the plain steps serve it too;
#          `COHORT_MMA_PRODUCTS=0 bash scripts/gpu/exact.sh ...` times the scalar kernel.
# Same calls as lane.sh; this call must also carry .gpu/bin/mtp.safetensors (the trained head).
#   bash scripts/gpu/exact.sh [check] [probe] [synth] [bench]
set -u
. scripts/gpu/smol.sh
# ncu_step LIMIT STEP NCU_ARGS...: one bench-step step (b1, draft, verify or ar) at the real
# geometry under Nsight Compute (`--profile-from-start off`, so only that step), within LIMIT s.
ncu_step() {
  local limit=$1 step=$2 kinds=b8 ncu
  shift 2
  [ "$step" = b1 ] && kinds=b1
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu 2>/dev/null | head -1)
  timeout "$limit" "$ncu" --profile-from-start off "$@" $B bench-step --synthetic qwen36-35b-a3b \
    --layers "${LAYERS:-40}" --iters 2 --prefill "${PREFILL:-64}" --steps $kinds --profile-step "$step" ${BSARGS:-}
}
# install_mlx_lm: mlx-lm's side from the wheels in /tmp/x (calls carrying .gpu/w3a and .gpu/w3b):
# MLX CUDA 0.32.3, mlx and mlx-lm into /tmp/site3, its JIT cache seeded when .gpu/ptx3 is carried.
install_mlx_lm() {
  local w3=/tmp/x/mlx_cuda_13-0.32.3-py3-none-manylinux_2_35_x86_64.whl
  [ -f /tmp/site3/mlx_lm/__init__.py ] && return 0
  cat /tmp/x/w3.a /tmp/x/w3.b > $w3
  echo "$(cat /tmp/x/w3.sha256)  $w3" | sha256sum -c --quiet || { echo "mlx-cuda 0.32.3 wheel: sha256 differs"; return 1; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site3 $w3 /tmp/x/mlx-0.32.3-*.whl /tmp/x/mlx_lm-*.whl 2>&1 | tail -2
  mkdir -p /tmp/ptx3
  [ -f .gpu/ptx3/ptx3.tar.xz ] && tar -xJf .gpu/ptx3/ptx3.tar.xz -C /tmp/ptx3
  return 0
}
# mirrored WORDS: the space-separated words in order and then reversed, as the array `order`
# (arms timed A B B A, so drift over a call weighs on each alike).
mirrored() {
  local -a words
  read -ra words <<< "$1"
  order=("${words[@]}")
  for ((i = ${#words[@]} - 1; i >= 0; i--)); do order+=("${words[i]}"); done
}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(check probe bench)
{
$B --version
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
for step in "${steps[@]}"; do
  echo "== $step"
  case $step in
    check) timeout 200 $B device --check-invariance ;;
    checkk) timeout "${CHECKK_S:-560}" $B device --check-kernels ;;
    timei)
      for kdir in ${KDIRS:-$COHORT_KERNEL_DIR}; do
        echo "-- kernels: $kdir"
        COHORT_KERNEL_DIR=$kdir timeout 200 $B device --time-invariance
      done ;;
    timem)
      mirrored "${KDIRS:-$COHORT_KERNEL_DIR}"
      for kdir in "${order[@]}"; do
        echo "-- kernels: $kdir"
        COHORT_KERNEL_DIR=$kdir timeout 100 $B device --time-moe
      done ;;
    probe) timeout 200 $B probe -m /tmp/smol --time-routes 20 ;;
    synth) timeout 300 $B probe --synthetic qwen36-35b-a3b --layers 8 --time-routes 10 ;;
    cycle) timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers 8 --iters 10 ;;
    cycleb) COHORT_MTP_ALLOW_INEXACT=1 timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers 8 --iters 10 ;;
    ctx)
      # How a step's cost grows with the context (issue 55): bench-step after a prefill of each
      # length in $PREFILLS (read 2,048 tokens at a time, as the engine does on a GPU), at the
      # real geometry with random weights.
      for p in ${PREFILLS:-64 8192 32768}; do
        echo "-- prefill $p"
        timeout "${CTX_S:-300}" $B bench-step --synthetic qwen36-35b-a3b --layers "${LAYERS:-40}" --iters 5 \
          --prefill "$p" ${BSARGS:-}
      done ;;
    bench) timeout 400 $B bench -m /tmp/smol --generation-mode mtp --rounds 2 --receipt $OUT/bench.json ;;
    reads)
      # Prompt reads as the engine serves them on the default model (issue 54): a $READ_LEN-token
      # prompt (default 2000), then 3 s later the same with 24 tokens more (resumed from the prompt
      # cache where it is exact), through `generate`, once under each arm of $ENVS (default: the
      # invariant route's pieces, then MLX's batched chunks), mirrored: each request's prompt
      # tokens, tokens reused, read time and time to first token.
      mirrored "${ENVS:-default COHORT_PROMPT_PIECES=0}"
      for arm in "${order[@]}"; do
        echo "-- $arm"
        (
          [ "$arm" = default ] || for kv in ${arm//,/ }; do export "$kv"; done
          timeout 300 python3 - "$B" "${READ_LEN:-2000}" <<'PY'
import json, random, subprocess, sys, time
# Each turn is sent once the one before has answered (the engine's start-up checks come first),
# the follow-up after 3 s of "thinking", as a chat client would.
random.seed(7)
first = [random.randrange(1000, 40000) for _ in range(int(sys.argv[2]))]
# A third, unrelated prompt of the same length: a fresh read in a process that has read before.
other = [random.randrange(1000, 40000) for _ in range(int(sys.argv[2]))]
turns = [first, first + [random.randrange(1000, 40000) for _ in range(24)], other]
gen = subprocess.Popen([sys.argv[1], "generate", "-m", "/tmp/smol", "-i", "-"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
for i, ids in enumerate(turns):
    if i:
        time.sleep(3)
    line = {"id": f"turn{i + 1}", "prompt_ids": ids, "max_tokens": 8, "ignore_eos": True}
    gen.stdin.write(json.dumps(line) + "\n")
    gen.stdin.flush()
    r = json.loads(gen.stdout.readline())
    s = r.get("stats", {})
    print(r.get("id"), "prompt", s.get("prompt_tokens"), "reused", s.get("cached_tokens"),
          "read_s %.3f" % s.get("prefill_s", 0), "ttft_s %.3f" % s.get("ttft_s", 0), r.get("error", ""))
gen.stdin.close()
gen.wait(timeout=60)
PY
        )
      done ;;
    chat)
      # Warm conversations through `cohort serve` on the device (issue 54): chat_bench.py's
      # scenarios ($CHAT_SCENARIOS, default turns,paste) on $CHAT_ARMS (default cohort with and
      # without its prompt cache), $CHAT_ROUNDS rounds ABBA, answers of $CHAT_ANSWER tokens; with
      # "mlx_lm.server" in $CHAT_ARMS, mlx-lm on MLX CUDA 0.32.3 (install_mlx_lm) serves the same
      # import as loaded. The table and receipt to $OUT/chat/.
      arms=${CHAT_ARMS:-cohort serve,cohort serve (no cache)}
      mlx_py=python3
      if [[ $arms == *mlx_lm.server* ]]; then
        install_mlx_lm || continue
        . scripts/gpu/peer_env.sh
        mlx_py=$PY
      fi
      timeout "${CHAT_S:-560}" python3 scripts/peers/chat_bench.py --model /tmp/smol --cohort "$B" \
        --peers /tmp/chatpeers --out "$OUT/chat" --rounds "${CHAT_ROUNDS:-2}" --answer "${CHAT_ANSWER:-128}" \
        --think "${CHAT_THINK:-0}" --arms "$arms" --scenarios "${CHAT_SCENARIOS:-turns,paste}" \
        --mlx-python "$mlx_py" --mlx-weights stock 2>&1 | grep -v TMA ;;
    envs)
      mirrored "${ENVS:-default}"
      for arm in "${order[@]}"; do
        echo "-- $arm"
        (
          [ "$arm" = default ] || for kv in ${arm//,/ }; do export "$kv"; done
          timeout 300 $B bench-step --synthetic qwen36-35b-a3b --layers "${LAYERS:-40}" --iters 10 ${BSARGS:-}
        )
      done ;;
    bins)
      mirrored "${BINS:-new=$B}"
      for arm in "${order[@]}"; do
        label=${arm%%=*} bin=${arm#*=}
        if [ "${bin%.xz}" != "$bin" ]; then
          [ -x "/tmp/bin_$label" ] || { xz -dc "$bin" > "/tmp/bin_$label" && chmod +x "/tmp/bin_$label"; }
          bin=/tmp/bin_$label
        fi
        echo "-- $label ($bin)"
        # Each build with the kernels it was built with (env.sh points COHORT_KERNEL_DIR at the tree).
        env -u COHORT_KERNEL_DIR timeout 300 "$bin" bench-step --synthetic qwen36-35b-a3b --layers "${LAYERS:-40}" --iters 10 ${BSARGS:-}
      done ;;
    ncu)
      s=${NCU_STEP:-b1} csv=/tmp/ncu_${NCU_STEP:-b1}_p${PREFILL:-64}.csv
      ncu_step 300 "$s" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --csv --page raw --print-units base --log-file "$csv" 2>&1 | grep -E "rror|^\| B" | head -8
      python3 scripts/gpu/ncu_summary.py "$csv" "$s after a prefill of ${PREFILL:-64}" | head -"${NCU_ROWS:-24}"
      cp "$csv" "$OUT/" ;;
    ncuk)
      ncu_step 400 "${NCU_STEP:-verify}" --kernel-name "regex:${NCU_KERNEL:-moe_experts_up}" --launch-count 2 \
        --set full > "$OUT/ncuk.txt" 2>&1
      grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|One or More Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit" "$OUT/ncuk.txt" | head -60 ;;
    peerprep)
      install_mlx_lm || exit 4
      rm -f /tmp/peer.done
      setsid bash -c '. scripts/gpu/peer_env.sh
        time (timeout 200 $PY scripts/gpu/q36_mlx_lm.py make --out /tmp/q36 2>&1 | grep -v TMA | tail -3)
        time (timeout 400 $PY scripts/gpu/q36_mlx_lm.py bench --model /tmp/q36 --rounds 1 2>&1 | grep -v TMA | tail -2)
        touch /tmp/peer.done' > /tmp/peer_prep.txt 2>&1 < /dev/null &
      echo "mlx-lm's checkpoint and first process started in the background" ;;
    peers)
      for _ in $(seq 120); do [ -f /tmp/peer.done ] && break; sleep 5; done
      echo "-- mlx-lm's make and first process:"; cat /tmp/peer_prep.txt
      [ -f /tmp/peer.done ] || { echo "still not done: no figures"; continue; }
      . scripts/gpu/peer_env.sh
      for arm in ${PEER_ARMS:-cohort mlx-lm cohort}; do
        echo "-- $arm"
        if [ $arm = cohort ]; then
          timeout 200 $B bench-step -m /tmp/q36 --prefill 512 --iters 30 ${BSARGS:-} 2>&1 | grep -vE "^  \[|TMA"
        else
          timeout 240 $PY scripts/gpu/q36_mlx_lm.py bench --model /tmp/q36 --prompt 512 --gen 64 --rounds "${PEER_ROUNDS:-3}" 2>&1 | grep -v TMA | tail -4
        fi
      done
      tar -cf - -C /tmp/ptx3 . | xz -T16 > $OUT/ptx3.tar.xz ;;
    checkm) COHORT_MMA_PRODUCTS=1 timeout 200 $B device --check-invariance ;;
    probem) COHORT_MMA_PRODUCTS=1 timeout 200 $B probe -m /tmp/smol --time-routes 20 ;;
    synthm) COHORT_MMA_PRODUCTS=1 timeout 300 $B probe --synthetic qwen36-35b-a3b --layers 8 --time-routes 10 ;;
    benchm) COHORT_MMA_PRODUCTS=1 timeout 400 $B bench -m /tmp/smol --generation-mode mtp --rounds 2 --receipt $OUT/benchm.json ;;
    tests)
      # The tests look for fixtures under /work/main.
      mkdir -p /work && ln -sfn "$PWD" /work/main
      for packed in .gpu/tbin/*.xz; do
        [ -f "$packed" ] || { echo "no test binaries carried (.gpu/tbin)"; break; }
        name=$(basename "$packed" .xz)
        xz -dc "$packed" > "/tmp/$name" && chmod +x "/tmp/$name"
        echo "-- test binary $name"
        (cd /tmp && MLX_ENABLE_TF32=0 timeout "${TEST_S:-300}" "/tmp/$name" --test-threads=1 --include-ignored ${TESTS:-}) \
          > "$OUT/test_$name.txt" 2>&1
        echo "exit $?" >> "$OUT/test_$name.txt"
        grep -E "^test |panicked|test result|^exit" "$OUT/test_$name.txt" | head -20
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
} 2>&1 | tee $OUT/exact.txt
save_ptx
