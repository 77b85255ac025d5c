#!/usr/bin/env python3
"""PyTorch's convolution times for gconv problem keys, measured the way gconv measures.

    gconv bench --file data/real-layers-n32.txt --dtype bf16 --list > keys.txt
    python3 bench/torch_conv.py keys.txt --out torch-bf16.csv
    gconv bench --file data/real-layers-n32.txt --dtype bf16 --torch-csv torch-bf16.csv

Each key (v1:<direction>:<dtype>:<layout>:n..:c..:k..:i..:f..:s..:p..:d..[:g..]) runs as
PyTorch runs it in training: channels-last tensors for NHWC-family layouts, cudnn.benchmark on
(cuDNN's find picks the algorithm), TF32 only for tf32 keys. The time is GPU time per call of
back-to-back calls: R calls captured into a CUDA graph (R chosen so a replay lasts about a
millisecond), the replay enqueued behind a spin kernel so the GPU never waits for the host,
timed by two events; the median of the samples. Warm L2 unless --cold-l2 (then one call per
sample after writing twice the L2's size).
"""

import argparse
import csv
import math
import statistics
import sys

import torch
import torch.nn.functional as F

SAMPLE_SECONDS = 1e-3
MAX_CALLS = 1000
SPIN_SECONDS = 50e-6


def parse_key(key):
    parts = key.strip().split(":")
    if len(parts) < 12 or parts[0] != "v1":
        raise ValueError(f"not a gconv v1 problem key: {key}")
    fields = {}
    for part in parts[4:]:
        fields[part[0]] = part[1:]
    sizes = lambda name: [int(v) for v in fields[name].split("x")]
    return {
        "direction": parts[1],
        "dtype": parts[2],
        "layout": parts[3],
        "n": int(fields["n"]),
        "c": int(fields["c"]),
        "k": int(fields["k"]),
        "g": int(fields.get("g", "1")),
        "input": sizes("i"),
        "filter": sizes("f"),
        "stride": sizes("s"),
        "pad": sizes("p"),
        "dilation": sizes("d"),
    }


DTYPES = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def channels_last(t, rank):
    if rank == 2:
        return t.contiguous(memory_format=torch.channels_last)
    if rank == 3:
        return t.contiguous(memory_format=torch.channels_last_3d)
    # 1D: N x C x W with the channels innermost in memory.
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def make_call(p):
    """A function that runs the problem's direction once, and the tensors it keeps alive."""
    rank = len(p["input"])
    dtype = DTYPES[p["dtype"]]
    dev = "cuda"
    out = [
        (i + 2 * pd - dl * (f - 1) - 1) // s + 1
        for i, f, s, pd, dl in zip(p["input"], p["filter"], p["stride"], p["pad"], p["dilation"])
    ]
    x = torch.rand([p["n"], p["c"]] + p["input"], device=dev, dtype=dtype) * 2 - 1
    w = torch.rand([p["k"], p["c"] // p["g"]] + p["filter"], device=dev, dtype=dtype) * 2 - 1
    dy = torch.rand([p["n"], p["k"]] + out, device=dev, dtype=dtype) * 2 - 1
    if p["layout"] in ("NWC", "NHWC", "NDHWC"):
        x, w, dy = (channels_last(t, rank) for t in (x, w, dy))
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    args = dict(stride=p["stride"], padding=p["pad"], dilation=p["dilation"], groups=p["g"])
    if p["direction"] == "fwd":
        return lambda: conv(x, w, None, **args), (x, w, dy)
    mask = [p["direction"] == "bwd-data", p["direction"] == "bwd-weight", False]

    def backward():
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, p["stride"], p["pad"], p["dilation"], False, [0] * rank, p["g"], mask
        )

    return backward, (x, w, dy)


def spin():
    # About SPIN_SECONDS of GPU time at the clock torch assumes: the host enqueues the timed
    # replay while the GPU runs it.
    torch.cuda._sleep(int(SPIN_SECONDS * 1.5e9))


def time_call(call, samples, cold_l2, flush):
    stream = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        for _ in range(3):  # cudnn.benchmark runs cuDNN's find on the first call
            call()
        torch.cuda.synchronize()
        spin()
        start.record()
        call()
        end.record()
        end.synchronize()
        one = start.elapsed_time(end) * 1e-3
        calls = 1 if cold_l2 else int(min(MAX_CALLS, max(1, math.ceil(SAMPLE_SECONDS / max(one, 1e-9)))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                call()
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(samples):
            if cold_l2:
                flush.zero_()
            spin()
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / calls)
    return statistics.median(times), calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("keys", help="a file of gconv problem keys, one per line (gconv bench --list)")
    ap.add_argument("--out", required=True, help="CSV to write (key, torch_ms, ...)")
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--cold-l2", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: PyTorch sees no CUDA GPU")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * getattr(props, "L2_cache_size", 64 << 20), dtype=torch.uint8, device="cuda") if a.cold_l2 else None
    keys = [l.strip() for l in open(a.keys) if l.strip() and not l.startswith("#")]
    # A rerun with the same --out measures only the keys it lacks, so a long run can be cut
    # into several calls.
    try:
        with open(a.out, newline="") as f:
            done = {row["key"] for row in csv.DictReader(f)}
    except FileNotFoundError:
        done = None
    failures = 0
    with open(a.out, "a" if done is not None else "w", newline="") as f:
        out = csv.writer(f)
        if done is None:
            out.writerow(["key", "torch_ms", "calls", "samples", "timing", "device", "torch", "cudnn"])
        keys = [k for k in keys if k not in (done or set())]
        for i, key in enumerate(keys):
            try:
                p = parse_key(key)
                torch.backends.cudnn.allow_tf32 = p["dtype"] == "tf32"
                call, _alive = make_call(p)
                ms, calls = time_call(call, a.samples, a.cold_l2, flush)
                timing = "graph replay, " + ("cold L2" if a.cold_l2 else "warm L2")
                out.writerow([key, f"{ms:.5f}", calls, a.samples, timing, props.name, torch.__version__, torch.backends.cudnn.version()])
                f.flush()
                print(f"[{i + 1}/{len(keys)}] {key} {ms:.4f} ms", flush=True)
            except Exception as e:  # one bad layer costs only its row
                failures += 1
                print(f"error: {key}: {e}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
