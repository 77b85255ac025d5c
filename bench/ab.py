#!/usr/bin/env python3
"""Compares two builds (or two settings) of a solver timed on the same keys, the way a kernel
change is judged before it is merged: each side's runs of

    gconv conv --file KEYS -S SOLVER -V 0 -t 1 --json >> SIDE.jsonl

(several passes appended; a key's time is its fastest pass, so a pass that paid for kernel
builds or ran beside other work does not count), then

    bench/ab.py BASE.jsonl [BASE2.jsonl ...] -- NEW.jsonl [NEW2.jsonl ...]

prints NEW / BASE geomean time per direction, over every key and over the keys whose config
changed, and the keys that moved most each way. Run both sides in one lease of one GPU.
"""
import argparse
import json
import math
import sys
from collections import defaultdict


def fastest(paths):
    """key -> (fastest time in ms, its config) over every line of the files."""
    best = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                try:
                    run = json.loads(line)
                except json.JSONDecodeError:
                    continue
                ms = run.get("time_ms")
                if ms is None or "key" not in run:
                    continue
                if run["key"] not in best or ms < best[run["key"]][0]:
                    best[run["key"]] = (ms, run.get("config"))
    return best


def geomean(ratios):
    return math.exp(sum(map(math.log, ratios)) / len(ratios))


def main():
    args = sys.argv[1:]
    if "--" not in args:
        sys.exit("usage: bench/ab.py BASE.jsonl... -- NEW.jsonl... [--top N]")
    split = args.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("new", nargs="+")
    parser.add_argument("--top", type=int, default=8)
    opts = parser.parse_args(args[split + 1:])
    base, new = fastest(args[:split]), fastest(opts.new)
    keys = [k for k in new if k in base]
    if not keys:
        sys.exit("no key was timed on both sides")
    every, changed = defaultdict(list), defaultdict(list)
    for key in keys:
        direction = key.split(":")[1]
        ratio = new[key][0] / base[key][0]
        for group in (every, changed) if base[key][1] != new[key][1] else (every,):
            group[direction].append(ratio)
            group["all"].append(ratio)
    print(f"{len(keys)} keys on both sides ({len(base)} base, {len(new)} new); new / base time, geomean:")
    for direction in sorted(every, key=lambda d: (d == "all", d)):
        moved = changed.get(direction, [])
        moved_text = f"{len(moved)} changed config {geomean(moved):.3f}" if moved else "no config changed"
        print(f"  {direction:11s} {len(every[direction]):4d} keys {geomean(every[direction]):.3f}; {moved_text}")
    ranked = sorted(keys, key=lambda k: new[k][0] / base[k][0])
    for title, rows in (("faster", ranked[: opts.top]), ("slower", ranked[::-1][: opts.top])):
        print(f"most {title}:")
        for key in rows:
            (b, bc), (n, nc) = base[key], new[key]
            config = nc if bc == nc else f"{bc} -> {nc}"
            print(f"  {n / b:.3f}  {b:.4f} -> {n:.4f} ms  {key}  {config}")


if __name__ == "__main__":
    main()
