#!/usr/bin/env python3
"""Writes a copy of a sweep whose cuDNN rows keep only the configs that some of cuDNN's listing
sources name (heuristic A, heuristic B, fallback, engine with default knobs), read from the
cuDNN listings a GPU session cached (`<kernel cache>/<hash>.cudnn-list.json`, as
`bench/fill_find_ranks.py` reads them). Validating the models on the copy shows what a pick
would lose if fast mode asked cuDNN for those sources alone, a cheaper listing; compare its
`--picks` sums against the full sweep's oracles. Rows whose listing is missing are kept.

    python3 bench/cudnn_sources.py data/sweeps/h200-heldout-bf16.csv.gz LISTINGS_DIR \\
        "heuristic A,heuristic B,fallback" /tmp/heldout-bf16-AB.csv.gz

Needs the `blake3` module (`pip install blake3`).
"""

import argparse
import csv
import functools
import gzip

from fill_find_ranks import config_text, read_listing, read_sweep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="a sweep CSV, gzipped")
    ap.add_argument("listings", help="a folder of *.cudnn-list.json")
    ap.add_argument("sources", help="comma-separated listing sources to keep, e.g. 'heuristic A,fallback'")
    ap.add_argument("out", help="the copy to write, gzipped")
    args = ap.parse_args()
    keep = [s.strip() for s in args.sources.split(",")]
    fields, rows = read_sweep(args.sweep)

    @functools.lru_cache(maxsize=None)
    def sources_of(device, key):
        listing = read_listing(args.listings, device, key)
        # A quick listing (fast mode's: no heuristic B, few engines) cannot say what the others name.
        if listing is not None and listing.get("quick", False):
            listing = None
        # notes: "<source>, <source>; notes: ..."
        return None if listing is None else {config_text(c["config"]): c["notes"].split(";")[0] for c in listing["all"]}

    kept, dropped, missing = [], 0, 0
    for row in rows:
        if row["solver"] == "cuda.cudnn":
            sources = sources_of(row["device"], row["key"])
            if sources is None:
                missing += 1
            elif not any(s in sources.get(row["config"], "") for s in keep):
                dropped += 1
                continue
        kept.append(row)
    with gzip.open(args.out, "wt", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)
    print(f"{args.out}: {len(kept)} rows kept, {dropped} cuDNN rows dropped, {missing} cuDNN rows without a listing kept")


if __name__ == "__main__":
    main()
