#!/usr/bin/env python3
"""Which rows of a float32 product through MLX's CPU backend (OpenBLAS sgemm, as setup.sh links it)
come out the same bits whatever else shares the product: the question a packed prefill (several
rows' prompts read in one forward, issue 39) has to answer before it can keep every row equal to
its solo run.

For each of the default model's product shapes it places one fixed input row at several positions
of blocks of M rows (the rest random) and compares that row's output with the same row in a block
of 8. Then it packs prompts of uneven lengths into one block, each padded to a multiple of ALIGN
rows, against each prompt alone padded the same way.

usage: scripts/sgemm_rows.py [--align 8]
Needs MLX's Python package on the same library cohort links (no virtualenv needed):
  python3 -m pip install --target /tmp/mlxpy mlx==0.32.2 numpy
  PYTHONPATH=/tmp/mlxpy LD_LIBRARY_PATH=.runtime/mlx-cpu/mlx/lib python3 scripts/sgemm_rows.py
"""
import argparse
import random

import mlx.core as mx

SHAPES = [(576, 576), (576, 192), (576, 1536), (1536, 576)]  # (input, output) of SmolLM2-135M
PROMPTS = (45, 37, 52, 45, 61, 29, 45, 40)


def product(w):
    def mm(x):
        y = x @ w.T
        mx.eval(y)
        return y

    return mm


def rows_by_block_size(k, n, rng):
    """Blocks of M rows, the fixed row at the start, the end and a random place: which differ from
    the row in a block of 8, for M a multiple of 8 and not."""
    mm = product(mx.random.normal((n, k)))
    row = mx.random.normal((1, k))
    filler = mx.random.normal((4100, k))
    ref = mm(mx.concatenate([row, filler[:7]], 0))[0]
    seen = {True: [], False: []}
    for m in list(range(1, 80)) + [360, 512, 1024, 2048, 4096]:
        for pos in sorted({0, rng.randrange(m), m - 1}):
            y = mm(mx.concatenate([filler[:pos], row, filler[pos + 1 : m]], 0))[pos]
            seen[m % 8 == 0].append((y == ref).all().item())
    return seen


def packed_against_alone(k, n, align):
    mm = product(mx.random.normal((n, k)))
    prompts = [mx.random.normal((length, k)) for length in PROMPTS]

    def pad(x):
        extra = -x.shape[0] % align
        return x if extra == 0 else mx.concatenate([x, mx.zeros((extra, k))], 0)

    alone = [mm(pad(p))[: p.shape[0]] for p in prompts]
    packed = mm(mx.concatenate([pad(p) for p in prompts], 0))
    at, differing = 0, 0
    for p, a in zip(prompts, alone):
        differing += (packed[at : at + p.shape[0]] != a).sum().item()
        at += pad(p).shape[0]
    return differing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--align", type=int, default=8)
    args = ap.parse_args()
    mx.random.seed(0)
    rng = random.Random(0)
    print(f"MLX {mx.__version__} on {mx.default_device()}")
    for k, n in SHAPES:
        seen = rows_by_block_size(k, n, rng)
        same8, other = seen[True], seen[False]
        print(
            f"{k}->{n}: M a multiple of 8: {sum(same8)} of {len(same8)} rows equal to the block of 8; "
            f"other M: {sum(other)} of {len(other)}; "
            f"{len(PROMPTS)} prompts packed, each padded to {args.align}: "
            f"{packed_against_alone(k, n, args.align)} elements differing from alone"
        )


if __name__ == "__main__":
    main()
