#!/usr/bin/env bash
# Before/after of the BLAS swap setup.sh makes: the wheel's bundled reference BLAS against
# Debian's OpenBLAS, on one f32 matmul (the runtime otherwise identical). Usage: scripts/bench-blas.sh [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-1024}
BIN="$ROOT/target/release/cohort-lab"
[ -x "$BIN" ] || { echo "build the lab first: cargo build --release -p cohort-lab" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A copy of the runtime whose libblas is the reference one; libmlx.so's RPATH ($ORIGIN) keeps the
# copy's libraries together, and LD_LIBRARY_PATH (before the binary's RUNPATH) selects the copy.
cp -r "$ROOT/.runtime/mlx-cpu/mlx" "$ROOT/.runtime/mlx-cpu/mlx_cpu.libs" "$tmp/"
for ref in "$tmp"/mlx_cpu.libs/*.reference; do rm -f "${ref%.reference}"; mv "$ref" "${ref%.reference}"; done
echo "reference BLAS (as shipped in the wheel):"
LD_LIBRARY_PATH="$tmp/mlx/lib" "$BIN" device --matmul "$N" --iters 5 | grep float32
echo "OpenBLAS (what setup.sh installs):"
"$BIN" device --matmul "$N" --iters 5 | grep float32
