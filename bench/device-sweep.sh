#!/usr/bin/env bash
# One slice of an H200 sweep on a GPU machine, resumable across calls and sessions: the sweep
# committed as data/sweeps/NAME.csv.gz travels with the tree, the sweep measures only the rows
# it lacks for this device, and the grown sweep comes back as $OUT/NAME.csv.gz, to commit over
# it (`gconv train` and `validate` read gzipped sweeps as they are).
#
#   bench/device-sweep.sh PROBLEMS DTYPE NAME SECONDS [sweep options...]   # ends by SECONDS + a problem's time
#   bench/device-sweep.sh data/problems/h200-synthetic-train.txt bf16 h200-train-bf16 480 --early-stop --configs-per-solver 16
#
# Prepare here: ../shared/tools/device-pack -p gconv-cli; xz -9 .device/bin/* (or gzip -9: xz
# takes a fifth less, the gconv binary embedding the models); carry .device without the wheels
# and test executables (the tree that travels holds 64 MiB).
# $OUT/NAME.log has the sweep's output and, last, the rows it added and the rate per second.
# Each call starts on a fresh machine with no kernels built: the kernel cache comes back as
# $OUT/kernels.tar.gz (where under 15 MiB), and one copied here as .device/kernels.tar.gz is
# unpacked first, so the next slice loads the kernels this one built instead of compiling them
# (and reads the cuDNN listings it made instead of listing again). The cuDNN listings alone, a
# few MiB where the kernels are tens, also come back as $OUT/cudnn-listings.tar.gz (where
# under 8 MiB); one copied here as .device/cudnn-listings.tar.gz is unpacked first.
set -u
problems=$1 dtype=$2 name=$3 seconds=$4
shift 4
cd "$(dirname "$0")/.."
for f in .device/bin/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
# python3's lzma: the GPU machine has Python (for PyTorch) where the xz tool may be missing.
for f in .device/bin/*.xz; do
  [ -e "$f" ] && python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], 'wb'))" "$f" && rm "$f"
done
chmod +x .device/bin/*
kernels=${XDG_CACHE_HOME:-$HOME/.cache}/gconv/kernels
mkdir -p "$kernels"
for cache in .device/kernels.tar.gz .device/cudnn-listings.tar.gz; do
  [ -f "$cache" ] && tar -xzf "$cache" -C "$kernels"
done
built_before=$(find "$kernels" -name "*.cubin" | wc -l)
csv=/tmp/$name.csv
# A machine still warm from an earlier slice holds that slice's rows, which the tree lacks.
[ ! -f "$csv" ] && [ -f "data/sweeps/$name.csv.gz" ] && gunzip -c "data/sweeps/$name.csv.gz" > "$csv"
before=$( [ -f "$csv" ] && wc -l < "$csv" || echo 0)
started=$(date +%s)
# The sweep stops handing out problems at SECONDS and finishes those under way (its summary
# says where the time went); the outer timeout is a guard against a hang.
timeout $((seconds + 90)) .device/bin/gconv sweep --problems "$problems" --dtype "$dtype" --out "$csv" \
  --time-limit-s "$seconds" "$@" > "$OUT/$name.log" 2>&1
status=$?
elapsed=$(( $(date +%s) - started ))
after=$(wc -l < "$csv")
echo "status $status: $((after - before)) rows in $elapsed s ($(awk "BEGIN { printf \"%.2f\", ($after - $before) / $elapsed }") a second)" >> "$OUT/$name.log"
gzip -9 -c "$csv" > "$OUT/$name.csv.gz"
echo "kernel cache: $built_before kernels brought, $(find "$kernels" -name "*.cubin" | wc -l) now, $(find "$kernels" -name "*.cudnn-list.json" | wc -l) cuDNN listings" >> "$OUT/$name.log"
( cd "$kernels" && find . -name '*.cudnn-list.json' -print0 | tar -czf /tmp/cudnn-listings.tar.gz --null -T - )
if [ "$(stat -c %s /tmp/cudnn-listings.tar.gz)" -lt $((8 << 20)) ]; then
  cp /tmp/cudnn-listings.tar.gz "$OUT/"
else
  echo "cuDNN listings: $(( $(stat -c %s /tmp/cudnn-listings.tar.gz) >> 20 )) MiB packed, too large to bring back" >> "$OUT/$name.log"
fi
tar -czf /tmp/kernels.tar.gz --exclude='*.building' -C "$kernels" .
# The tree that travels is limited to 64 MiB, and the repository with the packed gconv alone
# is about 45: a larger cache would not fit the next call.
if [ "$(stat -c %s /tmp/kernels.tar.gz)" -lt $((15 << 20)) ]; then
  cp /tmp/kernels.tar.gz "$OUT/"
else
  echo "kernel cache: $(( $(stat -c %s /tmp/kernels.tar.gz) >> 20 )) MiB packed, too large to bring back" >> "$OUT/$name.log"
fi
