#!/usr/bin/env python3
"""What PyTorch's first call of a convolution shape costs, beside a warm call of it: the
yardstick for gconv's first sight (`gconv select` prints its own on the same file).

    python3 bench/torch_first_sight.py data/problems/h200-heldout-networks.txt --dtype bf16 \
        --out first-sight.json

Each problem key of the file (one direction each) runs in this process for the first time
through the ATen operator PyTorch's own autograd calls (`aten::convolution` forward,
`aten::convolution_backward` with one gradient asked for), with `cudnn.benchmark` off (its
heuristic pick: no find) and on (cuDNN's find), each mode in a process of its own so that no
shape is seen twice. A call's wall time from its start until the GPU is idle again counts its
heuristics, plan building and the kernel; the warm figure, the best of three calls after it,
is the kernel and the call alone, and their difference what the first sight added.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

import torch

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
KEY = re.compile(
    r"v1:(?P<dir>fwd|bwd-data|bwd-weight):(?P<dtype>\w+):(?P<layout>N\w+):n(?P<n>\d+):c(?P<c>\d+):k(?P<k>\d+):"
    r"i(?P<i>[\dx]+):f(?P<f>[\dx]+):s(?P<s>[\dx]+):p(?P<p>[\dx]+):d(?P<d>[\dx]+)(?::g(?P<g>\d+))?$"
)


def dims(text):
    return [int(v) for v in text.split("x")]


def problem(key, dtype):
    m = KEY.match(key)
    if m is None:
        raise SystemExit(f"not a problem key: {key}")
    g = int(m["g"] or 1)
    n, c, k = int(m["n"]), int(m["c"]), int(m["k"])
    size, fil = dims(m["i"]), dims(m["f"])
    channels_last = m["layout"] in ("NWC", "NHWC", "NDHWC")
    # 1D has no channels-last memory format in torch: those run channels-first.
    fmt = {2: torch.channels_last, 3: torch.channels_last_3d}.get(len(size)) if channels_last else None
    t = DTYPES[dtype or m["dtype"]]

    def tensor(*shape):
        x = torch.randn(*shape, device="cuda", dtype=t)
        return x.contiguous(memory_format=fmt) if fmt is not None else x

    x, w = tensor(n, c, *size), tensor(k, c // g, *fil)
    args = (dims(m["s"]), dims(m["p"]), dims(m["d"]), False, [0] * len(size), g)
    direction = m["dir"]
    if direction == "fwd":
        return lambda: torch.ops.aten.convolution(x, w, None, *args)
    # The forward makes dy's shape: its own first sight, not the one measured.
    dy = torch.randn_like(torch.ops.aten.convolution(x, w, None, *args))
    mask = [direction == "bwd-data", direction == "bwd-weight", False]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, mask)


def wall_ms(call):
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def run_mode(keys, dtype, benchmark):
    """One process's measurements: first and warm wall time of each key, in ms."""
    torch.backends.cudnn.benchmark = benchmark
    torch.ones(1, device="cuda").sum().item()  # the context, outside any first sight
    out = []
    for key in keys:
        # The first sight of the shape is `call()`'s first run; the tensors' own making
        # (their random fill, the output the backward needs) comes before it.
        call = problem(key, dtype)
        first = wall_ms(call)
        warm = min(wall_ms(call) for _ in range(3))
        out.append({"key": key, "first_ms": first, "warm_ms": warm})
    return out


def percentiles(values):
    values = sorted(values)
    at = lambda q: values[round((len(values) - 1) * q)]
    return {"p50": at(0.5), "p99": at(0.99), "mean": statistics.fmean(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", help="a file of problem keys, one direction each")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="run every key in this dtype")
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=["heuristic", "benchmark"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    keys = []
    with open(args.problems) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                keys.append(line if args.dtype is None else re.sub(r"^v1:([\w-]+):\w+:", rf"v1:\1:{args.dtype}:", line))
    keys = list(dict.fromkeys(keys))
    if args.mode is not None:
        json.dump(run_mode(keys, args.dtype, args.mode == "benchmark"), sys.stdout)
        return
    report = {"problems": args.problems, "dtype": args.dtype, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    for mode in ("heuristic", "benchmark"):
        command = [sys.executable, __file__, args.problems, "--out", args.out, "--mode", mode]
        if args.dtype:
            command += ["--dtype", args.dtype]
        rows = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        added = [r["first_ms"] - r["warm_ms"] for r in rows]
        report[mode] = {"first_ms": percentiles([r["first_ms"] for r in rows]), "added_ms": percentiles(added), "rows": rows}
        print(f"{mode:9}: first call p50 {report[mode]['first_ms']['p50']:.3f} ms, p99 {report[mode]['first_ms']['p99']:.3f} ms; "
              f"added by first sight p50 {report[mode]['added_ms']['p50']:.3f} ms, p99 {report[mode]['added_ms']['p99']:.3f} ms ({len(rows)} problems)")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
