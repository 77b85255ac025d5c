#!/usr/bin/env python3
"""A full training step (forward, backward, optimizer step) of torchvision networks with
PyTorch's convolutions against the same model after `gconv.patch`, in one process.

    python3 bench/torch_train_step.py --out results.json [--nets resnet50,mobilenet_v2] [--select tune]

Each network is built with random weights (same seed for both sides), bf16 weights and
channels-last activations, batch 32, SGD with momentum, cuDNN's benchmark mode on. For each side,
in the order PyTorch then gconv:

- first step: wall time of the first step after the model is made (for gconv, after
  `gconv.tune` when --select tune; the tune's own time is reported apart), then each warm-up
  step's (`warmup_steps_ms`: gconv's third step captures its runs' graphs); for PyTorch also
  the first step of a fresh model after one forward and backward pass, as gconv.tune leaves
  it (`first_step_after_pass_ms`), the control for gconv's;
- eager: GPU time per step of --steps back-to-back steps between two CUDA events, after
  warm-up steps, and the peak memory allocated over them (above what the process held before
  the model was made);
- host: the host time of one step enqueued behind a busy GPU (nothing waits on the GPU), the
  eager step's floor when the step is host-bound, and the CPU time of the process in it;
- eager, interleaved: the eager step again, both sides ready in the process and timed in
  alternating rounds (the host's speed drifts within a process; rounds side by side see the
  same drift), after every network's other figures;
- graph: the whole step captured into one CUDA graph, replayed --steps times between events;
- conv: CUDA time of the convolution kernels per step under torch.profiler: all the kernels'
  time less that of kernels tied to operators other than `aten::convolution` and
  `aten::convolution_backward` (or the `gconv::conv*` operators and the `GconvConvolution`
  autograd node). Measured last, after every other figure of every network, on a step made
  again: once a profiler has run, every later launch in the process costs the host more (the
  profiler's CUPTI hooks stay; on an H200 PyTorch's MobileNetV2 step took 17.7 ms of host
  time before one profiled step and 28.1 ms after), which skewed eager figures measured after it.

--host-profile DIR writes where the host time of the first and of warm steps goes (cProfile).
--overhead adds the host time of one eager call on a tiny layer (no grad), each side.
"""

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision

import gconv

NETS = ["resnet50", "resnext50_32x4d", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "inception_v3", "squeezenet1_1"]
CONV_OPS = {
    "torch": {"aten::convolution", "aten::convolution_backward"},
    # The registered operators, and the eager path's autograd node, which the profiler ties
    # gconv's kernels to (its ranges inside are annotations, not the kernels' parents).
    "gconv": {"gconv::conv", "gconv::conv_backward_data", "gconv::conv_backward_weight", "gconv::conv_backward_bias", "GconvConvolution", "GconvConvolutionBackward"},
}


def build(name, device):
    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "inception_v3" else {}
    model = torchvision.models.get_model(name, weights=None, **kwargs)
    return model.to(device=device, dtype=torch.bfloat16, memory_format=torch.channels_last)


def batch(name, size, device):
    side = 299 if name == "inception_v3" else 224
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(size, 3, side, side, generator=g).to(device=device, dtype=torch.bfloat16, memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (size,), generator=g).to(device)
    return x, labels


def make_step(model, x, labels):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), labels)
        loss.backward()
        optimizer.step()
        return loss

    return step


def warm_step(name, side, size, device, warmup, tune=True):
    """A network's training step, ready to time: built (with gconv's side patched, and tuned
    unless told not to) and run `warmup` times."""
    model = build(name, device)
    x, labels = batch(name, size, device)
    if side == "gconv":
        gconv.patch(model)
        if tune:
            gconv.tune(model, x)
    step = make_step(model, x, labels)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    return step


def gpu_ms(fn, steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


SPIN_CYCLES = 400_000_000  # about 200 ms of GPU time: longer than a step takes the host


def busy_step(step):
    """Wall and CPU time (ms) of one step enqueued behind a GPU kept busy by a spin, so that no
    launch waits on the GPU: what the step costs the host alone; CPU time below the wall time
    is waiting (on a lock, on another thread). A step that synchronizes reads the spin's 200 ms."""
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN_CYCLES)
    started, started_cpu = time.perf_counter(), time.process_time()
    step()
    return (time.perf_counter() - started) * 1e3, (time.process_time() - started_cpu) * 1e3


def host_ms(step, reps=5):
    """Medians of `reps` busy steps' wall and CPU time: the eager step's bound when it is above
    the graph-replayed time."""
    wall, cpu = zip(*(busy_step(step) for _ in range(reps)))
    torch.cuda.synchronize()
    return statistics.median(wall), statistics.median(cpu)


def conv_ms(step, side, steps=3):
    """Kernel time per step of the convolutions: every kernel (and memset or copy) the device
    ran, less those the profiler ties to an operator outside the convolution operators. gconv
    launches its kernels itself, which the profiler ties to no operator: counting by
    subtraction treats both sides alike however their launches are attributed."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    # Every device activity from the profiler's raw record (kernels no operator claims too).
    raw = prof.profiler.kineto_results.events()
    device_ns = sum(e.end_ns() - e.start_ns() for e in raw if e.device_type() == cuda and not e.is_user_annotation())
    events = prof.events()

    def in_conv(event):
        while event is not None:
            if event.name in CONV_OPS[side]:
                return True
            event = event.cpu_parent
        return False

    other_us = sum(k.duration for e in events if e.device_type == cpu and e.kernels and not in_conv(e) for k in e.kernels)
    return (device_ns / 1000 - other_us) / 1000 / steps


def graph_ms(step, steps):
    side_stream = torch.cuda.Stream()
    side_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side_stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    return gpu_ms(graph.replay, steps)


def measure(name, side, args):
    device = torch.device("cuda")
    # What the process holds already (the other side's library workspaces, gconv's engine) is
    # not this side's step: peak memory is counted from here.
    base = torch.cuda.memory_allocated()
    model = build(name, device)
    x, labels = batch(name, args.batch, device)
    row = {"net": name, "side": side}
    if side == "gconv":
        report = gconv.patch(model)
        row["patched"] = len(report.swapped)
        row["left_on_torch"] = report.left
        if args.select == "tune":
            started = time.perf_counter()
            row["tune_selections"] = gconv.tune(model, x)
            torch.cuda.synchronize()
            row["tune_s"] = time.perf_counter() - started
    step = make_step(model, x, labels)
    torch.cuda.synchronize()
    started = time.perf_counter()
    with host_profile(args, f"{name}-{side}-first"):
        step()
        torch.cuda.synchronize()
    row["first_step_ms"] = (time.perf_counter() - started) * 1e3
    # The warm-up steps one by one: gconv captures a run's graph at its third sighting, so
    # its third step pays the captures.
    row["warmup_steps_ms"] = []
    for _ in range(args.warmup):
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        row["warmup_steps_ms"].append((time.perf_counter() - started) * 1e3)
    with host_profile(args, f"{name}-{side}-warm"):
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    row["eager_ms"] = statistics.median(gpu_ms(step, args.steps) for _ in range(3))
    row["host_ms"], row["host_cpu_ms"] = host_ms(step)
    row["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    if side == "gconv":
        row["launch_replays"] = gconv.launch_replays()  # so far in the process
    try:
        row["graph_ms"] = statistics.median(graph_ms(step, args.steps) for _ in range(2))
    except Exception as e:  # a network torch cannot capture is reported, not fatal
        row["graph_error"] = f"{type(e).__name__}: {e}"
    del model, step
    if side == "torch":
        row["first_step_after_pass_ms"] = first_step_after_pass(name, x, labels, device)
    torch.cuda.empty_cache()
    return row


def first_step_after_pass(name, x, labels, device):
    """PyTorch's first step made as gconv's is after `gconv.tune`: a fresh model, one forward
    and backward pass (cuDNN's choices are cached by now), gradients cleared, then the step:
    what a first step costs beyond a warm one on either side (optimizer state, allocations)."""
    model = build(name, device)
    model(x).float().sum().backward()
    model.zero_grad(set_to_none=True)
    step = make_step(model, x, labels)
    torch.cuda.synchronize()
    started = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3


@contextlib.contextmanager
def host_profile(args, name):
    """With --host-profile DIR, the host time of the block by function (cProfile), into
    DIR/name.txt; the timings of a profiled run are not comparable with others."""
    if not args.host_profile:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        with open(os.path.join(args.host_profile, name + ".txt"), "w") as f:
            pstats.Stats(profile, stream=f).sort_stats("tottime").print_stats(40)


def tiny_layer():
    x = torch.randn(1, 8, 8, 8, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    return x, w


def host_us(call, calls=2000):
    """Host time per call of back-to-back calls (the tiny layer's GPU time is far below it)."""
    with torch.no_grad():
        for _ in range(50):
            call()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls):
                call()
            samples.append((time.perf_counter() - started) / calls * 1e6)
            torch.cuda.synchronize()
    return min(samples)


def overhead():
    """Host time of one eager call on a tiny layer: PyTorch's, gconv's, and the part of gconv's
    spent in the engine's run (launch included), with the solver it runs."""
    x, w = tiny_layer()
    out = {"torch_us": host_us(lambda: F.conv2d(x, w, None, 1, 1)), "gconv_us": host_us(lambda: gconv.conv2d(x, w, None, 1, 1))}
    spec = gconv._eager._specs[gconv._eager.signature(x, w, None, (2, 1, 1, 1, 1))]
    plan, _ = spec.plans["fwd"]
    y = torch.empty((1, 8, 8, 8), device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    workspace = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    out["engine_run_us"] = host_us(lambda: plan.run(x.data_ptr(), w.data_ptr(), y.data_ptr(), workspace.data_ptr(), plan.workspace_bytes, stream))
    out["solver"] = f"{plan.solver} {plan.config} ({plan.source})"
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--select", choices=["tune", "find", "fast"], default="tune", help="how gconv selects: tune ahead, or the mode on first sight")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--db", help="gconv's user database (a fresh path measures first sight; default: gconv's)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--host-profile", metavar="DIR", help="write the host time by function of the first step and of 10 warm steps (cProfile) to DIR")
    parser.add_argument("--resume", action="store_true", help="keep the rows already in --out and measure the rest")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    if args.host_profile:
        os.makedirs(args.host_profile, exist_ok=True)
    if args.select != "tune":
        gconv.set_mode(args.select)
    if args.db:
        gconv.set_database(args.db)
    done = set()
    if args.resume:
        with open(args.out) as f:
            earlier = json.load(f)
        done = {(r["net"], r["side"]) for r in earlier["rows"]}
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "args": vars(args), "rows": []}
    if args.overhead:
        result["overhead"] = overhead()
        print(json.dumps(result["overhead"]), flush=True)
    if args.resume:
        result["rows"] = earlier["rows"]
    for name in filter(None, args.nets.split(",")):
        for side in ("torch", "gconv"):
            if (name, side) in done:
                continue
            row = measure(name, side, args)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            save(result, args.out)
    interleave(result, args)
    # The profiler last: it slows every launch after it (see conv above).
    for row in result["rows"]:
        if "conv_ms" not in row:
            step = warm_step(row["net"], row["side"], args.batch, torch.device("cuda"), args.warmup, tune=args.select == "tune")
            row["conv_ms"] = conv_ms(step, row["side"])
            del step
            torch.cuda.empty_cache()
            print(json.dumps({k: row[k] for k in ("net", "side", "conv_ms")}), flush=True)
            save(result, args.out)


ROUNDS = 6


def interleave(result, args):
    """Each network's eager step timed again with both sides made ready in the process and
    measured in alternating rounds (torch, gconv, gconv, torch, ...), the median of each side's
    rounds: the host's speed drifts within a process by a quarter (PyTorch's MobileNetV2 step
    20.0 ms and 14.8 ms measured minutes apart in one process on an H200), and rounds side by
    side see the same drift."""
    rows = {(r["net"], r["side"]): r for r in result["rows"]}
    for name in dict.fromkeys(r["net"] for r in result["rows"]):
        pair = [rows.get((name, side)) for side in ("torch", "gconv")]
        if None in pair or all("eager_interleaved_ms" in r for r in pair):
            continue
        steps = [warm_step(name, side, args.batch, torch.device("cuda"), args.warmup, tune=args.select == "tune") for side in ("torch", "gconv")]
        rounds = [[], []]
        for r in range(ROUNDS):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                rounds[i].append(gpu_ms(steps[i], args.steps))
        for row, times in zip(pair, rounds):
            row["eager_interleaved_ms"] = statistics.median(times)
            row["eager_rounds_ms"] = times
        del steps
        torch.cuda.empty_cache()
        print(json.dumps({"net": name, "eager_interleaved_ms": [row["eager_interleaved_ms"] for row in pair]}), flush=True)
        save(result, args.out)


def save(result, path):
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
