#!/usr/bin/env python3
"""Fits the wave model behind cuda.igemm_wgmma's forward and backward-data defaults (the
`forward_and_backward_data_*` entries of crates/gconv-cuda/src/solvers/igemm_wgmma/wave-models.json)
to config sweeps, and says how well it picks.

    bench/wave_model.py data/bench/h100-2026-11-23-cb4b14f-config-sweeps-bf16.csv.gz data/bench/h100-2026-11-23-39e0022-config-sweeps-bf16.csv.gz

Model: a config (tile shape: columns bn, consumers wg, 64-row slices per consumer mr, persistent
or not; split ks) runs each product with taps (forward: one; backward-data: one per sub-pixel
phase) in ceil(units / SMS) waves, units = row tiles x column tiles x ks x groups, each wave
costing `blocks / ks x per_block[shape] + per_wave[shape]`; a split adds a constant and a cost
per million destination elements; stored zeros (phases no tap reaches) and a constant complete
the time. Least squares on relative error. Prints the costs (the JSON entry's tiles and split), then
per layer the model's pick against the fastest config swept, in sample and with the layer left
out of the fit, and against the default of the build that ran the `*-base` side of an A/B when
given (--defaults, lines `DEF key config`). Needs numpy. Clusters (cl 2) are left out: the
defaults add them by a rule of their own.

--tf32 fits tf32's costs (the `_tf32` entries): reduction
blocks of 32 channels or pixels where 16-bit types have 64.

--weight fits `backward_weight_one_tap_*` instead: 1x1 backward-weight layers of up to 100 blocks of pixels
(WEIGHT_1X1_MAX_PIXEL_BLOCKS), tiles of 64 x wg rows (output channels) by bn columns (input
channels), ceil(tiles x ks / SMS) waves of the blocks / ks each, a split's
cost a constant and per million fp32 sums (units x tile size) added by atomics, or with the sums
in the cluster (red 2, two slices) a constant and a cost per million of its own.
"""
import argparse
import collections
import csv
import gzip
import itertools
import json
import math
import re

import numpy as np

SMS = 132
# (bn, wg, mr, persistent): the order of the JSON entry's tiles.
SHAPES = [(64, 1, 1, 1), (64, 2, 1, 1), (128, 1, 1, 1), (128, 2, 1, 1), (256, 1, 1, 1), (256, 2, 1, 1), (64, 2, 2, 1), (128, 2, 2, 0)]
WEIGHT_SHAPES = [(64, 1, 1, 0), (64, 2, 1, 0), (128, 1, 1, 0), (128, 2, 1, 0), (256, 1, 1, 0), (256, 2, 1, 0)]
WEIGHT_FITTED = ("cda7f63-small-1x1-bwd-weight",)
WEIGHT_FITTED_TF32 = ("5f7e743-tf32-bwd-weight-sweep",)
WEIGHT_MAX_PIXEL_BLOCKS = 100
WEIGHT_KEY = re.compile(r"v1:bwd-weight:(bf16|f16|tf32):NHWC:n(\d+):c(\d+):k(\d+):i(\d+)x(\d+):f1x1:s(\d+)x(\d+):p0x0:d1x1$")
FITTED = ("39e0022-small-fwd-bwd-data", "rows-per-consumer", "small-fwd-bwd-data", "39e0022-default-ab-1-base", "39e0022-default-ab-1-new")
FITTED_TF32 = ("5f7e743-tf32-fwd-bwd-data-sweep",)
KEY = re.compile(r"v1:(fwd|bwd-data):(bf16|f16|tf32):N[DH]*WC:n(\d+):c(\d+):k(\d+):i([\dx]+):f([\dx]+):s([\dx]+):p([\dx]+):d([\dx]+)(?::g(\d+))?$")


def row_elements(dtype):
    """Reduction elements in a tile's 128-byte row: a block of channels or pixels."""
    return 32 if dtype == "tf32" else 64


def products(key):
    """(rows, columns, reduction blocks, groups) of each product the layer runs, else None."""
    m = KEY.match(key)
    if not m:
        return None
    direction, dtype, n, c, k, i, f, s, p, d, g = m.groups()
    n, c, k, g = int(n), int(c), int(k), int(g or 1)
    row = row_elements(dtype)
    extent, fil, stride, pad, dil = [list(map(int, v.split("x"))) for v in (i, f, s, p, d)]
    dims = range(len(extent))
    if direction == "fwd":
        out = [(extent[j] + 2 * pad[j] - dil[j] * (fil[j] - 1) - 1) // stride[j] + 1 for j in dims]
        return [(n * math.prod(out), k // g, math.prod(fil) * math.ceil(c // g / row), g)]
    phases = []
    for j in dims:
        per_dim = []
        for r in range(stride[j]):
            origin = (r - pad[j]) % stride[j]
            count = (extent[j] - origin + stride[j] - 1) // stride[j] if origin < extent[j] else 0
            per_dim.append((count, sum(1 for t in range(fil[j]) if t * dil[j] % stride[j] == r)))
        phases.append(per_dim)
    found = []
    for combo in itertools.product(*phases):
        rows = n * math.prod(count for count, _ in combo)
        if rows:
            found.append((rows, c // g, math.prod(taps for _, taps in combo) * math.ceil(k // g / row), g))
    return found


def fields(config):
    return {name: int(value) for name, value in re.findall(r"([a-z]+)(\d+)", config)}


def features(key, config):
    f = fields(config)
    shape = (f["bn"], f["wg"], f.get("mr", 1), f["ps"])
    found = products(key)
    if found is None or f.get("cl", 1) != 1 or shape not in SHAPES:
        return None
    ks, i = f.get("ks", 1), SHAPES.index(shape)
    x = np.zeros(2 * len(SHAPES) + 4)
    for rows, columns, blocks, groups in found:
        if blocks == 0:
            x[-3] += rows * columns * groups / 1e6
            continue
        units = math.ceil(rows / (64 * shape[1] * shape[2])) * math.ceil(columns / shape[0]) * ks * groups
        waves = math.ceil(units / SMS)
        x[i] += waves * blocks / ks
        x[len(SHAPES) + i] += waves
    if ks > 1:
        x[-4] = sum(rows * columns * groups for rows, columns, _, groups in found) / 1e6
        x[-2] = 1
    x[-1] = 1
    return x


def weight_features(key, config):
    m = WEIGHT_KEY.match(key)
    f = fields(config)
    if not m or f.get("cl", 1) != 1 or (f["bn"], f["wg"], 1, f["ps"]) not in WEIGHT_SHAPES:
        return None
    dtype, n, c, k, h, w, sh, sw = m.groups()
    n, c, k, h, w, sh, sw = map(int, (n, c, k, h, w, sh, sw))
    bn, wg, ks = f["bn"], f["wg"], f.get("ks", 1)
    pixel_blocks = math.ceil(n * math.ceil(h / sh) * math.ceil(w / sw) / row_elements(dtype))
    if pixel_blocks > WEIGHT_MAX_PIXEL_BLOCKS:
        return None
    i = WEIGHT_SHAPES.index((bn, wg, 1, f["ps"]))
    units = math.ceil(k / (64 * wg)) * math.ceil(c / bn) * ks
    waves = math.ceil(units / SMS)
    x = np.zeros(2 * len(WEIGHT_SHAPES) + 6)
    x[i] = waves * pixel_blocks / ks
    x[len(WEIGHT_SHAPES) + i] = waves
    if ks > 1 and f.get("red") == 2:
        # Clusters of four slices wait on GPCs with room for them (1.2-1.6x the atomics' time
        # in the sweep of 771bbaf, 2026-11-23): the defaults take two.
        if ks != 2:
            return None
        x[-6] = units * 64 * wg * bn / 1e6
        x[-5] = 1
    elif ks > 1:
        x[-4] = units * 64 * wg * bn / 1e6
        x[-2] = 1
    x[-1] = 1
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", help="config sweeps: key, solver, config, time_ms, sweep")
    ap.add_argument("--sweeps", nargs="+", default=FITTED, help="the sweeps to fit")
    ap.add_argument("--defaults", help="`DEF key config` lines: the defaults to compare with")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per layer")
    ap.add_argument("--weight", action="store_true", help="fit the 1x1 backward-weight model")
    ap.add_argument("--tf32", action="store_true", help="fit tf32's costs (the _tf32 entries)")
    args = ap.parse_args()
    shapes, featurize = (WEIGHT_SHAPES, weight_features) if args.weight else (SHAPES, features)
    if args.sweeps == FITTED:
        args.sweeps = {(False, False): FITTED, (False, True): FITTED_TF32, (True, False): WEIGHT_FITTED, (True, True): WEIGHT_FITTED_TF32}[(args.weight, args.tf32)]
    samples = []
    for path in args.csv:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            for r in csv.DictReader(f):
                x = featurize(r["key"], r["config"]) if r["sweep"] in args.sweeps else None
                if x is not None:
                    samples.append((r["key"], r["config"], x, float(r["time_ms"]) * 1e3))
    if not samples:
        raise SystemExit("no igemm_wgmma rows of the modelled layers and shapes in those sweeps")
    x = np.array([s[2] for s in samples])
    y = np.array([s[3] for s in samples])
    weight = 1 / y

    def fit(mask):
        coef, *_ = np.linalg.lstsq(x[mask] * weight[mask, None], y[mask] * weight[mask], rcond=None)
        return coef

    coef = fit(np.ones(len(y), dtype=bool))
    n = len(shapes)
    tiles = [
        {"bn": shape[0], "wg": shape[1], "mr": shape[2], "persistent": bool(shape[3]), "per_block_us": round(block, 3), "per_wave_us": round(wave, 2)}
        for shape, block, wave in zip(shapes, coef[:n], coef[n : 2 * n])
    ]
    entry = {"fitted": "bench/wave_model.py " + " ".join(args.csv), "tiles": tiles, "split_us": round(coef[-2], 2)}
    if args.weight:
        entry.update(split_us_per_million_sums=round(coef[-4], 2), cluster_sums_us=round(coef[-5], 2), cluster_sums_us_per_million=round(coef[-6], 2))
    else:
        entry.update(split_us_per_million_elements=round(coef[-4], 2))
    print(json.dumps(entry, indent=1))
    extra = "" if args.weight else f"; stored zeros {coef[-3]:.2f} us per million"
    print(f"(not in the model: constant {coef[-1]:.2f} us{extra})")
    defaults = {}
    if args.defaults:
        with open(args.defaults) as f:
            defaults = {line.split()[1]: line.split()[2] for line in f if line.startswith("DEF ")}
    by_key = collections.defaultdict(list)
    for i, s in enumerate(samples):
        by_key[s[0]].append(i)
    ratios = collections.defaultdict(list)
    for key, rows in sorted(by_key.items()):
        fastest = min(y[i] for i in rows)
        inside = min(rows, key=lambda i: x[i] @ coef)
        left_out = fit(np.array([s[0] != key for s in samples]))
        outside = min(rows, key=lambda i: x[i] @ left_out)
        ratios["in sample"].append(y[inside] / fastest)
        ratios["left out"].append(y[outside] / fastest)
        default = [i for i in rows if samples[i][1] == defaults.get(key)]
        if default:
            ratios["defaults"].append(y[default[0]] / fastest)
        if args.verbose:
            print(f"  {y[inside] / fastest:5.2f} {y[outside] / fastest:5.2f}  {samples[outside][1]:36s} {key}")
    for name, r in ratios.items():
        print(f"{name}: time / fastest swept, geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f}, worst {max(r):.2f} ({len(r)} layers)")


if __name__ == "__main__":
    main()
