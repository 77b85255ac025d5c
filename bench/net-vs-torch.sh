#!/usr/bin/env bash
# A network tuned by gconv, run from its tuning JSON, and its layers timed by PyTorch the same
# way (bench/torch_conv.py: cudnn.benchmark, graph replay); the report sets each setting's and
# the winner's total beside PyTorch's.
#
#   bench/net-vs-torch.sh NET BATCH OUTDIR [gconv net tune options...]
#
# Runs .device/bin/gconv when a release build was copied there, else gconv from PATH.
set -euo pipefail
net=$1 batch=$2 out=$3
shift 3
gconv=.device/bin/gconv
[ -x "$gconv" ] || gconv=gconv
name=$(basename "$net" .txt)
mkdir -p "$out"
"$gconv" net tune "$net" --batch "$batch" -o "$out/$name.json" "$@" > "$out/$name-tune.txt"
"$gconv" net run "$net" --batch "$batch" --tuning "$out/$name.json" > "$out/$name-run.txt"
"$gconv" net report "$out/$name.json" --keys > "$out/$name-keys.txt"
PYTHONUNBUFFERED=1 python3 bench/torch_conv.py "$out/$name-keys.txt" --out "$out/$name-torch.csv" > "$out/$name-torch.log" 2>&1 || true
"$gconv" net report "$out/$name.json" --torch-csv "$out/$name-torch.csv" > "$out/$name-report.txt"
