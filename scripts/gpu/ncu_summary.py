#!/usr/bin/env python3
"""Sum one profiled step's kernels by name from Nsight Compute's raw CSV.

Input: `ncu --import R.ncu-rep --csv --page raw --print-units base --metrics gpu__time_duration.sum`
(or the same flags on a live run). Each row is one kernel launch; ncu serialises them, so the
durations are device time with no overlap and no launch gaps. Their sum is what the step would take
if the host were free; the step's wall time minus it is what the device spent waiting.

Output: a markdown table of kernel families (the name up to its template or argument list), with
launches, total and mean microseconds and share, largest first; then the largest launch shapes.
"""

import csv
import re
import signal
import sys
from collections import defaultdict

UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def family(name: str) -> str:
    """`void mlx::core::cu::gather_qmm_kernel<...>(...)` -> `mlx::core::cu::gather_qmm_kernel`."""
    name = re.sub(r"^void\s+", "", name.strip())
    for stop in ("<", "("):
        if stop in name:
            name = name[: name.index(stop)]
    return name.strip() or "(unnamed)"


def rows(stream):
    """Yield (kernel name, grid, block, duration in us) for each launch in the CSV."""
    reader = csv.reader(line for line in stream if not line.startswith("=="))
    header = None
    scale = None
    for cells in reader:
        if header is None:
            if "Kernel Name" in cells:
                header = cells
                name_at = header.index("Kernel Name")
                time_at = next(i for i, h in enumerate(header) if h.startswith("gpu__time_duration"))
                grid_at = header.index("Grid Size") if "Grid Size" in header else None
                block_at = header.index("Block Size") if "Block Size" in header else None
            continue
        if len(cells) <= max(name_at, time_at):
            continue
        value = cells[time_at].replace(",", "")
        if scale is None and not re.match(r"^[0-9.]+$", value):
            # The units row right after the header.
            scale = UNIT_TO_US.get(value.strip(), None)
            if scale is None:
                sys.exit(f"unknown duration unit {value!r} in the units row")
            continue
        try:
            duration = float(value)
        except ValueError:
            continue
        grid = cells[grid_at] if grid_at is not None else ""
        block = cells[block_at] if block_at is not None else ""
        yield cells[name_at], grid, block, duration * (scale if scale is not None else 1e-3)
    if header is None:
        sys.exit("no 'Kernel Name' column: is this ncu's --csv --page raw output?")


def main() -> None:
    # Read through `head`: stop quietly when it has its rows.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    path = sys.argv[1] if len(sys.argv) > 1 else "-"
    title = sys.argv[2] if len(sys.argv) > 2 else path
    stream = sys.stdin if path == "-" else open(path, newline="")
    total = 0.0
    launches = 0
    by_family = defaultdict(lambda: [0, 0.0, set()])
    by_launch = defaultdict(lambda: [0, 0.0])
    for name, grid, block, us in rows(stream):
        g = by_launch[(family(name), grid, block)]
        g[0] += 1
        g[1] += us
        f = by_family[family(name)]
        f[0] += 1
        f[1] += us
        if len(f[2]) < 3:
            f[2].add(f"{grid}x{block}")
        total += us
        launches += 1
    if launches == 0:
        sys.exit("no kernel launches in the report: did the profiling window open (bench-step --profile-step)?")
    print(f"### {title}: {launches} kernels, {total:.1f} us of device time")
    print()
    print("| kernel | launches | total us | mean us | share | grid x block (first seen) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (n, us, shapes) in sorted(by_family.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {us:.1f} | {us / n:.2f} | {100 * us / total:.1f}% | {', '.join(sorted(shapes))} |")
    print()
    print("The 15 largest by launch shape (one kernel family at one grid and block):")
    print()
    print("| kernel | grid | block | launches | total us | mean us | share |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (name, grid, block), (n, us) in sorted(by_launch.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"| {name} | {grid} | {block} | {n} | {us:.1f} | {us / n:.2f} | {100 * us / total:.1f}% |")


if __name__ == "__main__":
    main()
