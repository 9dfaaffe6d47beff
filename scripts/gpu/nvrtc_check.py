#!/usr/bin/env python3
"""Compile cohort's CUDA kernel bodies (crates/core/src/model/cuda/*.cu) with NVRTC here, without a GPU.

MLX compiles each body on the GPU machine inside a signature it generates from the kernel's
input and output names, with the template arguments as constants. This wraps each body the same
way (an approximation of MLX's wrapper: typed pointers, `<name>_shape` as const int*, constants
declared before the body) and compiles it for sm_90, so a syntax or type error costs no device
time. Passing here does not prove the kernel right: the float64 checks on the device do that.

Setup (package registries only): pip download --no-deps nvidia-cuda-nvrtc-cu12 and
nvidia-cuda-runtime-cu12 (for cuda_bf16.h), unzip both into one folder, and pass it:
    python3 scripts/gpu/nvrtc_check.py /tmp/nvrtc/site

`--same-ptx DIR` compiles each body from the tree and from DIR and says whether the two give the
same PTX: DIR holds the texts cohort hands MLX, comments and indentation dropped (write them with
`NVRTC_CHECK_COMPACTED_DIR=DIR cargo test --lib cuda_kernel`), so equal PTX shows the compaction
changed no code.
"""

import ctypes
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The bodies to compile: the tree's (beside their wrappers), or COHORT_KERNEL_DIR's as the binary would read them.
KERNEL_DIR = pathlib.Path(os.environ.get("COHORT_KERNEL_DIR", ROOT / "crates/core/src/model/cuda"))

# name: (file, [(input, C type)], [(output, C type)], {constant: value}); kernels whose Rust
# wrapper hands MLX a header name it in HEADERS.
HEADERS = {
    "add_rms_norm": "round_to.cuh",
    "qk_norm_rope": "round_to.cuh",
    "gated_delta_fused": "round_to.cuh",
    "gated_delta_fused_unfolded": "round_to.cuh",
    "moe_experts_up": "affine_dot.cuh",
    "moe_experts_down": "affine_dot.cuh",
    "attention_short": "affine_dot.cuh",
    "attention_short_split": "affine_dot.cuh",
    "affine_rows": "affine_dot.cuh",
    "affine_rows_head": "affine_dot.cuh",
    "dense_rows": "affine_dot.cuh",
}
FUSED_ARGS = (
    [("proj", "__nv_bfloat16"), ("tail", "__nv_bfloat16"), ("conv_w", "__nv_bfloat16"),
     ("a_log", "__nv_bfloat16"), ("dt_bias", "__nv_bfloat16"), ("state_in", "float"), ("norm_w", "__nv_bfloat16"),
     ("place", "int")],
    [("y", "float"), ("state_out", "float"), ("states", "float"), ("conv_in", "__nv_bfloat16"),
     ("out", "__nv_bfloat16")],
)
# Unplaced, recur_fused passes the state in the place input's stead (never read).
FUSED_ARGS_UNPLACED = ([*FUSED_ARGS[0][:-1], ("place", "float")], FUSED_ARGS[1])
FUSED_SIZES = {"HK": 16, "HV": 32, "DK": 128, "DV": 128, "KS": 4, "CAPTURE": "true", "EPS_BITS": 897988541}
KERNELS = {
    "add_rms_norm": (
        "add_rms_norm.cu",
        [("x", "__nv_bfloat16"), ("r", "__nv_bfloat16"), ("w", "__nv_bfloat16")],
        [("h", "__nv_bfloat16"), ("y", "__nv_bfloat16")],
        {"D": 2049, "THREADS": 256, "EPS_BITS": 897988541},
    ),
    # The real geometry's attention layers: 16 query heads and 2 key heads of 256, a quarter rotated.
    "qk_norm_rope": (
        "qk_norm_rope.cu",
        [("p", "__nv_bfloat16"), ("qw", "__nv_bfloat16"), ("kw", "__nv_bfloat16"), ("offsets", "int")],
        [("qo", "__nv_bfloat16"), ("ko", "__nv_bfloat16")],
        {"N": 9216, "NH": 16, "NKV": 2, "HD": 256, "HALF": 32, "EPS_BITS": 897988541, "BASE_BITS": 1259902592, "WARPS": 4},
    ),
    "moe_router": (
        "moe_router.cu",
        [("logits", "__nv_bfloat16")],
        [("indices", "unsigned int"), ("scores", "float")],
        {"E": 256, "K": 8, "NORM": "true"},
    ),
    "gated_delta": (
        "gated_delta.cu",
        [("q", "__nv_bfloat16"), ("k", "__nv_bfloat16"), ("v", "__nv_bfloat16"), ("g", "float"),
         ("beta", "__nv_bfloat16"), ("state_in", "float")],
        [("y", "float"), ("state_out", "float"), ("states", "float")],
        {"HK": 16, "HV": 32, "DK": 128, "DV": 128, "CAPTURE": "true"},
    ),
    # The two layouts recur_fused launches: a whole head a block with the norm folded in (here
    # reading a verify's arrays in place), and four channels a block without it (here unplaced).
    "gated_delta_fused": ("gated_delta_fused.cu", *FUSED_ARGS, {**FUSED_SIZES, "CPB": 128, "WARPS": 16, "NORM": "true", "PLACED": "true"}),
    "gated_delta_fused_unfolded": (
        "gated_delta_fused.cu",
        *FUSED_ARGS_UNPLACED,
        {**FUSED_SIZES, "CPB": 4, "WARPS": 4, "NORM": "false", "PLACED": "false"},
    ),
    "moe_experts_up": (
        "moe_experts_up.cu",
        [("x", "__nv_bfloat16"), ("ids", "unsigned int"), ("gu_w", "unsigned int"), ("gu_s", "__nv_bfloat16"),
         ("gu_b", "__nv_bfloat16"), ("sgu_w", "unsigned int"), ("sgu_s", "__nv_bfloat16"), ("sgu_b", "__nv_bfloat16")],
        [("act", "float")],
        {"H": 2048, "I": 512, "IS": 512, "K": 8, "BITS": 4, "G": 64},
    ),
    "moe_experts_up_mma": (
        "moe_experts_up_mma.cu",
        [("x", "__nv_bfloat16"), ("ids", "unsigned int"), ("gu_w", "unsigned int"), ("gu_s", "__nv_bfloat16"),
         ("gu_b", "__nv_bfloat16"), ("sgu_w", "unsigned int"), ("sgu_s", "__nv_bfloat16"), ("sgu_b", "__nv_bfloat16")],
        [("act", "float")],
        {"H": 2048, "I": 512, "IS": 512, "K": 8, "BITS": 4, "G": 64, "WARPS": 8},
    ),
    "moe_experts_down": (
        "moe_experts_down.cu",
        [("act", "float"), ("ids", "unsigned int"), ("scores", "float"), ("gate", "__nv_bfloat16"),
         ("d_w", "unsigned int"), ("d_s", "__nv_bfloat16"), ("d_b", "__nv_bfloat16"),
         ("sd_w", "unsigned int"), ("sd_s", "__nv_bfloat16"), ("sd_b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"H": 2048, "I": 512, "IS": 512, "K": 8, "BITS": 4, "G": 64, "CPW": 4},
    ),
    "attention_short": (
        "attention_short.cu",
        [("q", "__nv_bfloat16"), ("keys", "__nv_bfloat16"), ("values", "__nv_bfloat16"), ("offsets", "int")],
        [("out", "__nv_bfloat16"), ("parts", "float"), ("stats", "float")],
        {"NH": 16, "NKV": 2, "D": 256, "T": 2, "WARPS": 8, "SCALE_BITS": 1031798784, "SPLIT": "false", "SEG": 1024},
    ),
    "attention_short_split": (
        "attention_short.cu",
        [("q", "__nv_bfloat16"), ("keys", "__nv_bfloat16"), ("values", "__nv_bfloat16"), ("offsets", "int")],
        [("out", "__nv_bfloat16"), ("parts", "float"), ("stats", "float")],
        {"NH": 16, "NKV": 2, "D": 256, "T": 1, "WARPS": 16, "SCALE_BITS": 1031798784, "SPLIT": "true", "SEG": 1024},
    ),
    "attention_merge": (
        "attention_merge.cu",
        [("parts", "float"), ("stats", "float")],
        [("out", "__nv_bfloat16")],
        {},
    ),
    # The default model's 4-bit projections, and its tied 8-bit LM head with four channels a warp.
    "affine_rows": (
        "affine_rows.cu",
        [("x", "__nv_bfloat16"), ("w", "unsigned int"), ("s", "__nv_bfloat16"), ("b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 1536, "N": 576, "BITS": 4, "G": 32, "CPW": 1},
    ),
    "affine_rows_head": (
        "affine_rows.cu",
        [("x", "__nv_bfloat16"), ("w", "unsigned int"), ("s", "__nv_bfloat16"), ("b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 576, "N": 49152, "BITS": 8, "G": 32, "CPW": 4},
    ),
    # The tensor-core kernel at the default model's 4-bit projections (one word a lane), its
    # 8-bit head (two words, four tiles a warp) and the real geometry's 4-bit g64 mixer input.
    "affine_mma": (
        "affine_mma.cu",
        [("x", "__nv_bfloat16"), ("w", "unsigned int"), ("s", "__nv_bfloat16"), ("b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 1536, "N": 576, "BITS": 4, "G": 32, "LW": 4, "NT": 1, "KS": 8},
    ),
    "affine_mma_head": (
        "affine_mma.cu",
        [("x", "__nv_bfloat16"), ("w", "unsigned int"), ("s", "__nv_bfloat16"), ("b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 576, "N": 49152, "BITS": 8, "G": 32, "LW": 2, "NT": 2, "KS": 3},
    ),
    "affine_mma_real": (
        "affine_mma.cu",
        [("x", "__nv_bfloat16"), ("w", "unsigned int"), ("s", "__nv_bfloat16"), ("b", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 2048, "N": 12352, "BITS": 4, "G": 64, "LW": 4, "NT": 2, "KS": 8},
    ),
    "dense_rows": (
        "dense_rows.cu",
        [("x", "__nv_bfloat16"), ("w", "__nv_bfloat16")],
        [("y", "__nv_bfloat16")],
        {"K": 576, "N": 49152, "CPW": 4},
    ),
}


def source(name, dtype, kernel_dir=None):
    kernel_dir = kernel_dir or KERNEL_DIR
    file, inputs, outputs, constants = KERNELS[name]
    inputs = [(a, dtype if t == "__nv_bfloat16" else t) for a, t in inputs]
    outputs = [(a, dtype if t == "__nv_bfloat16" else t) for a, t in outputs]
    body = (kernel_dir / file).read_text()
    params = []
    for arg, ctype in inputs:
        params += [f"const {ctype}* {arg}", f"const int* {arg}_shape"]
        if f"{arg}_ndim" in body:
            params.append(f"const int {arg}_ndim")
    for arg, ctype in outputs:
        params.append(f"{ctype}* {arg}")
    consts = "".join(
        f"constexpr {'bool' if v in ('true', 'false') else 'int'} {k} = {v};\n" for k, v in constants.items()
    )
    header = (kernel_dir / HEADERS[name]).read_text() if name in HEADERS else ""
    return (
        "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
        + header
        + consts
        + f'extern "C" __global__ void custom_kernel_{name}({", ".join(params)}) {{\n{body}\n}}\n'
    )


def compile_ptx(lib, include, name, src):
    """(status, log, PTX) of one NVRTC compile for sm_90."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90", b"--std=c++17", f"-I{include}".encode()]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    status = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = b""
    if status == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        ptx = buf.value
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return status, log.value.decode(errors="replace").strip(), ptx


def main():
    args = sys.argv[1:]
    against = None
    if "--same-ptx" in args:
        i = args.index("--same-ptx")
        against = pathlib.Path(args[i + 1])
        del args[i : i + 2]
    site = pathlib.Path(args[0] if args else "/tmp/nvrtc/site")
    lib = ctypes.CDLL(str(site / "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"))
    include = site / "nvidia/cuda_runtime/include"
    failed = 0
    # Each kernel in the model dtypes MLX may hand it: bf16 (the GPU default), float32, fp16.
    for name, dtype in [(k, d) for k in (args[1:] or KERNELS) for d in ("__nv_bfloat16", "float", "__half")]:
        status, text, ptx = compile_ptx(lib, include, name, source(name, dtype))
        verdict = "compiles" if status == 0 else "FAILS"
        if against is not None and status == 0:
            other = compile_ptx(lib, include, name, source(name, dtype, against))
            same = other[0] == 0 and other[2] == ptx
            verdict += ", same PTX from " + str(against) if same else ", DIFFERENT PTX from " + str(against)
            failed += not same
        print(f"{name} ({dtype}): {verdict}" + (f"\n{text}" if text else ""))
        failed += status != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
