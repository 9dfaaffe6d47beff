#!/usr/bin/env python3
"""Count the machine instructions of one of cohort's CUDA kernel bodies for sm_90, here, without a GPU.

nvrtc_check.py wraps each body the way MLX does and compiles it to PTX; this compiles the same
source to an sm_90 cubin, disassembles it with nvdisasm and prints the opcodes by count, so a
change meant to remove or add instructions (session 31: the int-to-float conversions of the
expert kernels, I2FP) can be checked before any device time is spent. The highest register
number is printed as a rough view of the register use that bounds occupancy. Counts are of the
instructions in the code, not of the ones executed.

Setup (package registries only), as nvrtc_check.py's plus nvdisasm:
    pip download --no-deps nvidia-cuda-nvrtc-cu12==12.8.93 nvidia-cuda-runtime-cu12==12.8.90 \
        nvidia-cuda-nvdisasm==13.5.37
    unzip each into /tmp/nvrtc/site, chmod +x /tmp/nvrtc/site/nvidia/cu13/bin/nvdisasm
Usage: sass_ops.py KERNEL [DTYPE] [NAME=VALUE ...]   e.g. moe_experts_down float BITS=8 CPW=1
"""

import collections
import ctypes
import pathlib
import re
import subprocess
import sys
import tempfile

import nvrtc_check

SITE = pathlib.Path("/tmp/nvrtc/site")


def cubin(source, name):
    lib = ctypes.CDLL(str(SITE / "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"))
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None) == 0
    opts = [b"--gpu-architecture=sm_90", b"--std=c++17", f"-I{SITE / 'nvidia/cuda_runtime/include'}".encode()]
    status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    if status != 0:
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        sys.exit(f"{name}: does not compile\n{log.value.decode(errors='replace')}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, out)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out.raw


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in nvrtc_check.KERNELS:
        sys.exit(f"usage: sass_ops.py KERNEL [DTYPE] [NAME=VALUE ...]; kernels: {', '.join(nvrtc_check.KERNELS)}")
    name = sys.argv[1]
    rest = sys.argv[2:]
    dtype = rest.pop(0) if rest and "=" not in rest[0] else "__nv_bfloat16"
    overrides = dict(kv.split("=", 1) for kv in rest)
    file, inputs, outputs, constants = nvrtc_check.KERNELS[name]
    nvrtc_check.KERNELS[name] = (file, inputs, outputs, {**constants, **overrides})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin(nvrtc_check.source(name, dtype), name))
        f.flush()
        sass = subprocess.run([str(SITE / "nvidia/cu13/bin/nvdisasm"), "-c", f.name], capture_output=True, text=True,
                              check=True).stdout
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1).split(".")[0]] += 1
    registers = max((int(r) for r in re.findall(r"\bR(\d+)\b", sass)), default=-1) + 1
    print(f"{name} ({dtype}, {overrides or 'default constants'}): {sum(ops.values())} instructions, "
          f"registers R0-R{registers - 1}")
    print(", ".join(f"{op} {n}" for op, n in ops.most_common()))


if __name__ == "__main__":
    main()
