#!/usr/bin/env python3
"""Writes the distinct convolution problems of built-in networks (data/nets/NAME.txt) as
problem keys, every direction of each, for `gconv sweep --problems` and `gconv validate`:

    bench/network_problems.py resnet50 mobilenet_v2 --batch 32 --layout NHWC > FILE

The networks' keys are forward fp32 at batch 1; the batch and layout given replace theirs,
and `--dtype` of the sweep sets the dtype. A shape shared by several networks is written once.
"""
import argparse
import os
import re
import sys

NETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "nets")
DIRECTIONS = ("fwd", "bwd-data", "bwd-weight")


def shapes(name):
    """The network's forward keys, in file order, without the direction."""
    path = os.path.join(NETS, name + ".txt")
    if not os.path.exists(path):
        known = sorted(f[:-4] for f in os.listdir(NETS) if f.endswith(".txt"))
        sys.exit(f"no built-in network {name!r} (known: {', '.join(known)})")
    with open(path) as f:
        for line in f:
            if line.startswith("#") or " : " not in line:
                continue
            key = line.split(" : ", 1)[1].strip()
            yield key.split(":", 2)[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nets", nargs="+")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layout", choices=["NCHW", "NHWC"], default="NHWC", help="NCHW or NHWC (1D and 3D keys take the matching family)")
    parser.add_argument("--exclude", action="append", default=[], metavar="FILE",
                        help="leave out the shapes of this problem file (repeatable): another set's, such as the held-out networks'")
    args = parser.parse_args()
    channels_last = args.layout == "NHWC"
    seen = set()
    for path in args.exclude:
        with open(path) as f:
            for line in f:
                if line.startswith("v1:"):
                    _, _, _, layout, rest = line.strip().split(":", 4)
                    seen.add((layout, rest))
    excluded = "".join(f" --exclude {path}" for path in args.exclude)
    print(f"# bench/network_problems.py {' '.join(args.nets)} --batch {args.batch} --layout {args.layout}{excluded}")
    for name in args.nets:
        for shape in shapes(name):
            dtype, layout, rest = shape.split(":", 2)
            spatial = layout.replace("N", "").replace("C", "")
            layout = f"N{spatial}C" if channels_last else f"NC{spatial}"
            rest = re.sub(r"^n\d+:", f"n{args.batch}:", rest)
            if (layout, rest) in seen:
                continue
            seen.add((layout, rest))
            for direction in DIRECTIONS:
                print(f"v1:{direction}:{dtype}:{layout}:{rest}")


if __name__ == "__main__":
    main()
