#!/usr/bin/env bash
# Times one solver's configs on KEYS with two gconv builds in one session on one GPU, the
# builds' passes alternating (the first pass of each also pays for its kernel builds; the
# fastest pass per key counts), then compares them with bench/ab.py.
#
#   bench/ab-run.sh SOLVER KEYS BASE_GCONV NEW_GCONV OUTDIR [PASSES] [-- CONV_OPTIONS...]
#
# e.g. bench/ab-run.sh cuda.igemm_wgmma keys.txt .device/bin/gconv-main .device/bin/gconv out 2
# Writes OUTDIR/base.jsonl and OUTDIR/new.jsonl (`gconv conv --json` lines) and prints the
# comparison. CONV_OPTIONS go to every `gconv conv` (say `--config ...`).
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,10p "$0" >&2; exit 2; }
solver=$1 keys=$2 base=$3 new=$4 out=$5
shift 5
passes=1
if [ $# -gt 0 ] && [ "$1" != "--" ]; then passes=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
mkdir -p "$out"
for _ in $(seq "$passes"); do
  for side in base new; do
    gconv=$base
    [ $side = new ] && gconv=$new
    # A key the solver cannot run fails the command at its end; the others are timed.
    "$gconv" conv --file "$keys" -S "$solver" -V 0 -t 1 --json "$@" >> "$out/$side.jsonl" || echo "$side: gconv conv exited $?" >&2
  done
done
python3 "$(dirname "$0")/ab.py" "$out/base.jsonl" -- "$out/new.jsonl"
