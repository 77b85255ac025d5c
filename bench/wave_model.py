#!/usr/bin/env python3
"""Fits a wave model of cuda.igemm_wgmma's forward and backward-data time to a config sweep, and
says how well it would pick: the step before a model-based default replaces the hand rules.

    bench/wave_model.py data/bench/h100-s19-config-sweeps-bf16.csv [--sweep small-fwd-bwd-data]

Model (persistent tiles, 1x1 stride-1 layers, whose product is one plain GEMM): a tile of
bn columns and wg consumers runs `waves = ceil(units / SMS)` waves, each costing
`blocks / ks x per_block[bn, wg] + per_wave[bn, wg]`, plus `split` when ks > 1 and a constant;
units = row tiles x column tiles x ks, blocks = reduction channels / 64. The costs are fitted by
least squares on relative error. Prints the fitted costs (us), then per layer the config the
model picks and its measured time over the fastest measured, in sample and with each layer left
out of the fit (the honest figure for layers the sweep never saw). Needs numpy.
"""
import argparse
import collections
import csv
import math
import re

import numpy as np

SMS = 132
SHAPES = [(bn, wg) for bn in (64, 128, 256) for wg in (1, 2)]
LAYER = re.compile(r"v1:(fwd|bwd-data):[a-z0-9]+:NHWC:n(\d+):c(\d+):k(\d+):i(\d+)x(\d+):f1x1:s1x1")


def gemm(key):
    """(rows, columns, reduction blocks) of a 1x1 stride-1 layer's product, else None."""
    m = LAYER.match(key)
    if not m:
        return None
    direction, n, c, k, h, w = m.groups()
    n, c, k, h, w = map(int, (n, c, k, h, w))
    columns, reduction = (k, c) if direction == "fwd" else (c, k)
    return n * h * w, columns, math.ceil(reduction / 64)


def fields(config):
    return {name: int(value) for name, value in re.findall(r"([a-z]+)(\d+)", config)}


def features(rows, columns, blocks, config):
    f = fields(config)
    bn, wg, ks = f["bn"], f["wg"], f.get("ks", 1)
    waves = math.ceil(math.ceil(rows / (64 * wg)) * math.ceil(columns / bn) * ks / SMS)
    x = np.zeros(2 * len(SHAPES) + 2)
    i = SHAPES.index((bn, wg))
    x[i] = waves * blocks / ks
    x[len(SHAPES) + i] = waves
    x[-2] = ks > 1
    x[-1] = 1
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="a config sweep: key, solver, config, time_ms, sweep")
    ap.add_argument("--sweep", default="small-fwd-bwd-data")
    args = ap.parse_args()
    samples = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            shape = gemm(r["key"])
            fs = fields(r["config"])
            if r["sweep"] != args.sweep or shape is None or fs.get("ps") != 1 or fs.get("mr", 1) != 1 or fs.get("cl") != 1:
                continue
            samples.append((r["key"], r["config"], features(*shape, r["config"]), float(r["time_ms"]) * 1e3))
    if not samples:
        raise SystemExit(f"no persistent igemm_wgmma rows of 1x1 stride-1 layers in sweep {args.sweep}")
    x = np.array([s[2] for s in samples])
    y = np.array([s[3] for s in samples])
    weight = 1 / y

    def fit(mask):
        coef, *_ = np.linalg.lstsq(x[mask] * weight[mask, None], y[mask] * weight[mask], rcond=None)
        return coef

    def pick(coef, key):
        mine = [(x[i] @ coef, y[i], samples[i][1]) for i in range(len(y)) if samples[i][0] == key]
        fastest = min(t for _, t, _ in mine)
        _, time, config = min(mine)
        return time / fastest, config

    everything = np.ones(len(y), dtype=bool)
    coef = fit(everything)
    print("us per block per wave:", {f"bn{bn} wg{wg}": round(c, 2) for (bn, wg), c in zip(SHAPES, coef)})
    print("us per wave:          ", {f"bn{bn} wg{wg}": round(c, 2) for (bn, wg), c in zip(SHAPES, coef[len(SHAPES):])})
    print(f"split: {coef[-2]:.2f} us, constant: {coef[-1]:.2f} us")
    keys = sorted({s[0] for s in samples})
    ratios = collections.defaultdict(list)
    for key in keys:
        inside, config = pick(coef, key)
        outside, _ = pick(fit(np.array([s[0] != key for s in samples])), key)
        ratios["in sample"].append(inside)
        ratios["left out"].append(outside)
        print(f"  {inside:5.2f} {outside:5.2f}  {config:32s} {key}")
    for name, r in ratios.items():
        print(f"{name}: pick / fastest geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f}, worst {max(r):.2f} ({len(r)} layers)")


if __name__ == "__main__":
    main()
