#!/usr/bin/env python3
"""Where a host-bound eager training step's host time goes with gconv: the step's wall and CPU
time enqueued behind a busy GPU (nothing waits on the GPU), split into the time spent inside
gconv's forward and backward functions, the collector's passes and the rest (PyTorch's other
operators, the autograd engine, the optimizer), beside PyTorch's own step, measured again
after gconv's (whether gconv's presence slows PyTorch's own operators); and each side's plain
eager step time (20 steps back to back); the launches' time is also split by the solver
launched (`launch_by_solver`: ms a step, launches a step, us a launch).

    python3 bench/torch_step_phases.py --out phases.json [--nets mobilenet_v2] [--order torch,gconv,profile,torch,gconv]

`gconv-direct` in --order is gconv with every run launched as it is (`gconv.set_launch_replay(False)`),
`gconv` replays runs made again on the same memory from graphs (the default). `profile` in
--order runs one profiled PyTorch step (torch.profiler, as the training-step
script's conv time does) before the sides after it: on an H200 every later step cost the host
more (PyTorch's MobileNetV2 step 17.7 -> 28.1 ms, gconv's 18.3 -> 24.0 ms).

The split times each call of `gconv._eager._forward`, `_backward` and `Spec.launch` (the
native run, inside the other two), wrapped for the measurement, on whichever thread runs it:
the backward may run on the autograd engine's device thread, which a profiler of the main
thread does not see.
"""

import argparse
import gc
import json
import statistics
import threading
import time

import torch

import gconv
import gconv._eager as eager
from torch_train_step import busy_step, conv_ms, gpu_ms, warm_step

class Timed:
    """Wraps `owner.<name>` (a function of gconv's eager module), summing the wall time of its
    calls."""

    def __init__(self, owner, name):
        self.name, self.inner = name.strip("_"), getattr(owner, name)
        self.seconds, self.calls, self.lock = 0.0, 0, threading.Lock()
        setattr(owner, name, self)

    def __call__(self, *args):
        started = time.perf_counter()
        try:
            return self.inner(*args)
        finally:
            spent = time.perf_counter() - started
            with self.lock:
                self.seconds += spent
                self.calls += 1

    def take(self):
        with self.lock:
            taken = (self.seconds * 1e3, self.calls)
            self.seconds, self.calls = 0.0, 0
        return taken


class LaunchesBySolver:
    """Wraps `Spec.launch` (the native run), summing its calls' wall time by the solver
    launched."""

    def __init__(self):
        self.name, self.inner, self.spent = "launch_by_solver", eager.Spec.launch, {}
        inner, spent = self.inner, self.spent

        def launch(spec, found, *addresses):
            started = time.perf_counter()
            try:
                return inner(spec, found, *addresses)
            finally:
                seconds, calls = spent.get(found[0].solver, (0.0, 0))
                spent[found[0].solver] = (seconds + time.perf_counter() - started, calls + 1)

        eager.Spec.launch = launch

    def take(self):
        taken = {solver: (seconds * 1e3, calls) for solver, (seconds, calls) in self.spent.items()}
        self.spent.clear()
        return taken


class GcTime:
    """The collector's passes and the wall time they took, summed until taken."""

    def __init__(self):
        self.name, self.seconds, self.calls, self.started = "gc", 0.0, 0, 0.0
        gc.callbacks.append(self.note)

    def note(self, phase, info):
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self.started
            self.calls += 1

    def take(self):
        taken = (self.seconds * 1e3, self.calls)
        self.seconds, self.calls = 0.0, 0
        return taken


def measure(name, side, args, timers, by_solver):
    # `gconv-direct`: gconv with every run launched as it is, none replayed from a graph.
    gconv.set_launch_replay(side != "gconv-direct")
    step = warm_step(name, "gconv" if side.startswith("gconv") else side, args.batch, torch.device("cuda"), warmup=5)
    plain = gpu_ms(step, 20)
    rows, launches = [], {}
    by_solver.take()
    for _ in range(args.steps):
        for t in timers:
            t.take()
        wall, cpu = busy_step(step)
        row = {"wall_ms": wall, "cpu_ms": cpu}
        for t in timers:
            row[f"{t.name}_ms"], row[f"{t.name}_calls"] = t.take()
        by = by_solver.take()
        row["launch_ms"], row["launch_calls"] = sum(ms for ms, _ in by.values()), sum(calls for _, calls in by.values())
        rows.append(row)
        for solver, (ms, calls) in by.items():
            total = launches.get(solver, (0.0, 0))
            launches[solver] = (total[0] + ms, total[1] + calls)
    torch.cuda.synchronize()
    out = {"net": name, "side": side, "eager_ms": plain}
    for key in rows[0]:
        out[key] = statistics.median(r[key] for r in rows)
    out["launch_by_solver"] = {s: (ms / args.steps, calls / args.steps, ms / calls * 1e3) for s, (ms, calls) in launches.items()}
    out["launch_replays"] = gconv.launch_replays()  # so far in the process
    print(json.dumps(out), flush=True)
    return out


def profile_once(name, args):
    """One profiled PyTorch step, as the training-step script's conv time takes."""
    step = warm_step(name, "torch", args.batch, torch.device("cuda"), warmup=1)
    out = {"net": name, "side": "profile", "conv_ms": conv_ms(step, "torch", steps=1)}
    print(json.dumps(out), flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", default="mobilenet_v2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--order", default="torch,gconv,torch", help="the sides measured, in order, per network (`profile`: one profiled step; `gconv-direct`: gconv without launch replay)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    # The forward and backward calls, and within them the launches (the native runs).
    by_solver = LaunchesBySolver()
    timers = [Timed(eager, "_forward"), Timed(eager, "_backward"), GcTime()]
    # PyTorch again after gconv: whether gconv's presence in the process slows PyTorch's own ops.
    sides = args.order.split(",")
    rows = [
        profile_once(name, args) if side == "profile" else measure(name, side, args, timers, by_solver)
        for name in filter(None, args.nets.split(","))
        for side in sides
    ]
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
