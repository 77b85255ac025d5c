#!/usr/bin/env python3
"""What each convolution layer of a network costs the host, PyTorch's calls against gconv's,
with the GPU kept busy so that no call waits on it (the cost of an eager, host-bound step).

    python3 bench/torch_host_cost.py --out host-cost.json [--nets mobilenet_v2,resnet50]

For every distinct layer of each network (bf16, channels-last, batch 32, after `gconv.tune`):
PyTorch's forward call (`F.conv2d`) and its backward (`aten::convolution_backward`, input and
weight gradients), gconv's whole forward call (`gconv.conv2d`, no grad), and the native run of
each of gconv's plans (forward, backward-data, backward-weight) with the solver it runs. Each
figure is the best of three rounds of back-to-back calls enqueued behind a GPU spin.
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F

import gconv
import gconv._eager as eager
from torch_train_step import warm_step

CALLS = 40


def host_us(call):
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(60_000_000)  # longer than CALLS calls take the host
        started = time.perf_counter()
        for _ in range(CALLS):
            call()
        best = min(best, (time.perf_counter() - started) / CALLS * 1e6)
    torch.cuda.synchronize()
    return best


def layer_row(name, spec):
    x = spec.empty(spec.x_size, spec.x_strides).normal_()
    w = spec.empty(spec.w_size, spec.w_strides).normal_()
    dy = spec.empty(spec.y_size, spec.y_strides).normal_()
    geometry = (spec.stride, spec.padding, spec.dilation, spec.groups)
    row = {"net": name, "x": spec.x_size, "w": spec.w_size, "stride": spec.stride, "groups": spec.groups}
    with torch.no_grad():
        row["torch_fwd_us"] = host_us(lambda: F.conv2d(x, w, None, *geometry))
        row["torch_bwd_us"] = host_us(
            lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, list(spec.stride), list(spec.padding), list(spec.dilation), False, [0, 0], spec.groups, [True, True, False]
            )
        )
        row["gconv_fwd_call_us"] = host_us(lambda: gconv.conv2d(x, w, None, *geometry))
    stream = torch.cuda.current_stream().cuda_stream
    for direction, (plan, workspace_bytes) in spec.plans.items():
        workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        row[f"{direction}_solver"] = f"{plan.solver} {plan.config}"
        # Every plan takes (x, w, y) addresses, writing its direction's output among them.
        row[f"{direction}_run_us"] = host_us(
            lambda: plan.run(x.data_ptr(), w.data_ptr(), dy.data_ptr(), workspace.data_ptr(), workspace_bytes, stream)
        )
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", default="mobilenet_v2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    rows = []
    for name in filter(None, args.nets.split(",")):
        eager._specs.clear()
        step = warm_step(name, "gconv", args.batch, device, warmup=3)
        for spec in list(eager._specs.values()):
            rows.append(layer_row(name, spec))
            print(json.dumps(rows[-1]), flush=True)
        del step
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
