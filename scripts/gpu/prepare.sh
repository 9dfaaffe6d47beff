#!/bin/bash
# Run here, before a session's first GPU call: everything the calls carry, under the ignored .gpu/
# (a fresh checkout has none of it). The machine is given back 30 s after a call ends, so nothing
# may need building between calls.
#   .gpu/w1/wheel.a, .gpu/w2/wheel.b + wheel.sha256   mlx-cuda-13==0.32.2 from PyPI, in two parts
#   .gpu/bin/cohort.xz                                 cohort-lab (every cohort command and the lab's), stripped
#   .gpu/tbin/<test>.xz                                each test binary named on the command line
#   .gpu/ptx/                                          MLX's JIT cache, filled by save_ptx's returns
#   with KOLD_REV=<rev>, .gpu/kold/: the kernel bodies (*.cu, *.cuh) as of that revision, for an arm that sets
#   COHORT_KERNEL_DIR to it (the same binary running the older kernels side by side)
#   with PEERS=1, mlx-lm's side: .gpu/w3a/ w3.a, .gpu/w3b/ w3.b + w3.sha256 + the
#   mlx and mlx-lm wheels (mlx-cuda-13==0.32.3, which mlx-lm's quantized MoE needs)
# Usage: [PEERS=1] bash scripts/gpu/prepare.sh [test binary ...]   e.g. kernels engine (tests/<area>/)
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(./setup.sh env)"
mkdir -p .gpu/w1 .gpu/w2 .gpu/bin .gpu/tbin .gpu/ptx
WHEEL=mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl
if [ ! -s .gpu/w2/wheel.sha256 ]; then
  # 46 MiB a part: each call's carry (the tree is ~15 MiB) stays under its 64 MiB.
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
    mlx-cuda-13==0.32.2 -d "$tmp"
  sha256sum "$tmp/$WHEEL" | cut -d' ' -f1 > .gpu/w2/wheel.sha256
  head -c 46M "$tmp/$WHEEL" > .gpu/w1/wheel.a
  tail -c +$((46 * 1024 * 1024 + 1)) "$tmp/$WHEEL" > .gpu/w2/wheel.b
  rm -rf "$tmp"
fi
if [ "${PEERS:-0}" = 1 ] && [ ! -s .gpu/w3b/w3.sha256 ]; then
  mkdir -p .gpu/w3a .gpu/w3b
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
    mlx-cuda-13==0.32.3 -d "$tmp"
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
    --python-version 3.12 mlx==0.32.3 -d .gpu/w3b
  python3 -m pip download -q --no-deps mlx-lm==0.32.2 -d .gpu/w3b
  W3=$tmp/mlx_cuda_13-0.32.3-py3-none-manylinux_2_35_x86_64.whl
  sha256sum "$W3" | cut -d' ' -f1 > .gpu/w3b/w3.sha256
  head -c 46M "$W3" > .gpu/w3a/w3.a
  tail -c +$((46 * 1024 * 1024 + 1)) "$W3" > .gpu/w3b/w3.b
  rm -rf "$tmp"
fi
if [ -n "${KOLD_REV:-}" ]; then
  rm -rf .gpu/kold && mkdir -p .gpu/kold
  # That revision's kernel bodies: beside their wrappers since the workspace, in kernels/ before.
  if git cat-file -e "$KOLD_REV:crates/core/src/model/cuda" 2>/dev/null; then
    git archive "$KOLD_REV" crates/core/src/model/cuda \
      | tar -x --strip-components=5 -C .gpu/kold --wildcards '*.cu' '*.cuh'
  else
    git archive "$KOLD_REV" kernels | tar -x --strip-components=1 -C .gpu/kold
  fi
fi
# The lab's binary: every command of cohort's and the lab's (bench, bench-step, device checks).
cargo build --release -p cohort-lab
strip -o /tmp/cohort.stripped target/release/cohort-lab
xz -T2 -c /tmp/cohort.stripped > .gpu/bin/cohort.xz
for t in "$@"; do
  exe=$(cargo test --release --no-run --test "$t" --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys; t=sys.argv[1]; print([j["executable"] for j in map(json.loads, sys.stdin) if j.get("executable") and j["target"]["name"] == t and j["target"]["kind"] == ["test"]][-1])' "$t")
  strip -o "/tmp/$t.stripped" "$exe"
  xz -T2 -c "/tmp/$t.stripped" > ".gpu/tbin/$t.xz"
done
du -sh .gpu/*
