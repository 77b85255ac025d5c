#!/usr/bin/env python3
"""Gives the cuDNN rows of a sweep that were measured before the sweep recorded a config's place
on cuDNN's find list (`find`, not `find@N`) that place, read from the cuDNN listings the sweeps
cached (`<kernel cache>/<hash>.cudnn-list.json`, which `bench/device-sweep.sh` brings back as
cudnn-listings.tar.gz). A listing belongs to one device key and problem key; its `find` list
is in cuDNN's heuristic order, the order `gconv sweep` numbers. Nothing is measured again and
no other field changes; rows whose listing is missing keep `find`.

    python3 bench/fill_find_ranks.py data/sweeps/h200-heldout-f32.csv.gz LISTINGS_DIR

Before writing it checks every row that has its place already against the listing and
refuses on any disagreement. Needs the `blake3` module (`pip install blake3`), the hash that
names a listing.
"""

import argparse
import csv
import functools
import gzip
import io
import json
import os
import sys

import blake3

LISTING_FORMAT = "cudnn-listing-1"


def listing_name(device, key):
    h = blake3.blake3()
    for part in (LISTING_FORMAT, device, key):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest() + ".cudnn-list.json"


@functools.lru_cache(maxsize=None)
def read_listing(folder, device, key):
    """A problem's cuDNN listing (its JSON) from a folder of them, or None where it lacks it."""
    path = os.path.join(folder, listing_name(device, key))
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def read_sweep(path):
    """A sweep CSV's field names and rows, gzipped or not."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def config_text(config):
    fields = config["fields"]
    if not fields:
        return "default"
    # A field whose name ends in a digit is written name=value (cuDNN's knobs, `k2=4`).
    return "_".join(f"{n}={v}" if n[-1].isdigit() else f"{n}{v}" for n, v in fields)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="a sweep CSV, gzipped or not; rewritten in place")
    ap.add_argument("listings", help="a folder of *.cudnn-list.json")
    args = ap.parse_args()
    fields, rows = read_sweep(args.sweep)

    def find_list(device, key):
        listing = read_listing(args.listings, device, key)
        return None if listing is None else [config_text(c) for c in listing["find"]]

    filled = checked = missing = 0
    for row in rows:
        words = row["vendor"].split("+") if row["vendor"] else []
        if row["solver"] != "cuda.cudnn" or not any(w == "find" or w.startswith("find@") for w in words):
            continue
        listed = find_list(row["device"], row["key"])
        if listed is None:
            missing += 1
            continue
        place = listed.index(row["config"]) if row["config"] in listed else None
        known = next((int(w[5:]) for w in words if w.startswith("find@")), None)
        if known is not None:
            if known != place:
                sys.exit(f"{row['key']} {row['config']}: the sweep says find@{known}, the listing {place}")
            checked += 1
        elif place is not None:
            row["vendor"] = "+".join(f"find@{place}" if w == "find" else w for w in words)
            filled += 1
        else:
            missing += 1
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with (gzip.open if args.sweep.endswith(".gz") else open)(args.sweep, "wt", newline="") as f:
        f.write(out.getvalue())
    print(f"{args.sweep}: {filled} places filled, {checked} known and agreeing, {missing} without a listing")


if __name__ == "__main__":
    main()
