#!/usr/bin/env bash
# Measures data/real-layers-n32.txt on a GPU machine the way data/bench/ was measured:
# PyTorch's times first (bench/torch_conv.py), then gconv bench with the PyTorch column.
#
#   bench/device-run.sh DTYPE OUTDIR [FIRST LAST]
#
# FIRST..LAST (1-based, inclusive) picks a slice of the problem keys, so a long run can be
# split over several calls; PyTorch's CSV in OUTDIR is completed, not remeasured, on a rerun. Runs
# .device/bin/gconv when a release build was copied there, else gconv from PATH
# (cargo install --path crates/gconv-cli).
set -euo pipefail
dtype=$1 out=$2 first=${3:-1} last=${4:-100000}
gconv=.device/bin/gconv
[ -x "$gconv" ] || gconv=gconv
mkdir -p "$out"
"$gconv" bench --file data/real-layers-n32.txt --dtype "$dtype" --list > "$out/keys-$dtype.txt"
PYTHONUNBUFFERED=1 python3 bench/torch_conv.py "$out/keys-$dtype.txt" --out "$out/torch-$dtype.csv" >> "$out/torch-$dtype.log" 2>&1 || true
sed -n "${first},${last}p" "$out/keys-$dtype.txt" > "$out/slice.txt"
"$gconv" bench --file "$out/slice.txt" --dtype "$dtype" --torch-csv "$out/torch-$dtype.csv" \
  --csv "$out/bench-$dtype-$first.csv" > "$out/bench-$dtype-$first.txt"
