#!/bin/bash
# Call 4: assemble, install, import the default model; kernel check; default-model B1 figures;
# mlx-lm side by side on the same imported checkpoint.
set -u
. scripts/gpu/env.sh
X=/tmp/x
cat $X/part.aa $X/part.ab > $X/mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl
cat $X/gguf.aa $X/gguf.ab .gpu/g/gguf.ac > $X/smol.gguf
echo "$(cut -d' ' -f1 .gpu/g/gguf.sha256)  $X/smol.gguf" | sha256sum -c || exit 3
python3 -m pip install -q --no-index --no-deps --target /tmp/site $X/mlx_cuda_13-*.whl $X/mlx-0.32.2-*.whl $X/mlx_lm-*.whl 2>&1 | tail -2
cp .gpu/bin/cohort $B && chmod +x $B
$B --version
$B import-gguf $X/smol.gguf --out /tmp/m/smol 2>&1 | tail -2
echo "== kernel check"; timeout 240 $B device --check-kernels 2>&1 | grep -v TMA | tail -12
python3 - > /tmp/b1.jsonl <<'PY'
import json
text = ("The history of lighthouses begins with fires on hilltops and grows through towers of stone, "
        "lenses of glass, and keepers who trimmed the wicks through long winter nights. ") * 9
print(json.dumps({"id":"warm","prompt":"Hello there","max_tokens":8,"temperature":0}))
for i in range(3):
    print(json.dumps({"id":f"b1-{i}","prompt":text,"max_tokens":128,"temperature":0,"ignore_eos":True}))
print(json.dumps({"id":"fr","prompt":"What is the capital of France?","chat":True,"max_tokens":32,"temperature":0}))
PY
echo "== default model B1 AR (serial)"; timeout 300 $B generate -m /tmp/m/smol -i /tmp/b1.jsonl --scheduler serial --generation-mode ar > $OUT/gpu_ar.jsonl 2>$OUT/gpu_ar.err
tail -3 $OUT/gpu_ar.err; cut -c1-600 $OUT/gpu_ar.jsonl
echo "== mlx-lm side by side (AR)"; timeout 200 python3 scripts/bench_vs_mlx_lm.py --model /tmp/m/smol --keep-dtype --rounds 3 --binary $B 2>&1 | grep -v TMA | tail -8
cp assets/smollm2-135m-instruct.mtp.safetensors /tmp/m/smol/mtp.safetensors
echo "== probe with the head"; timeout 60 $B probe -m /tmp/m/smol 2>&1 | grep -v TMA | tail -4
echo "== mlx-lm side by side (with MTP, inexact allowed)"; COHORT_MTP_ALLOW_INEXACT=1 timeout 200 python3 scripts/bench_vs_mlx_lm.py --model /tmp/m/smol --keep-dtype --rounds 3 --binary $B 2>&1 | grep -v TMA | tail -8
rm /tmp/m/smol/mtp.safetensors
