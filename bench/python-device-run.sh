#!/usr/bin/env bash
# The Python package's measurements on a GPU machine, resumable across calls (each call does
# what its time allows; rerun it with the same OUTDIR to go on):
#
#   source bench/device-python-env.sh; bench/python-device-run.sh OUTDIR [NETS]
#
# 1. the host time of one eager call (bench/torch_train_step.py --overhead);
# 2. the default mode: MobileNetV2's first and steady steps with a fresh database in `find` and
#    in `fast` mode (nothing tuned ahead);
# 3. the training-step table: every network (NETS, comma-separated; default all seven), PyTorch
#    against gconv tuned ahead by gconv.tune, eager and graph-replayed, first step and memory.
set -euo pipefail
out=$1 nets=${2:-resnet50,resnext50_32x4d,mobilenet_v2,efficientnet_b0,convnext_tiny,inception_v3,squeezenet1_1}
mkdir -p "$out"
step=bench/torch_train_step.py
resume() { [ -f "$1" ] && echo --resume || true; }
[ -f "$out/overhead.json" ] || python3 $step --nets "" --overhead --out "$out/overhead.json"
for mode in find fast; do
  [ -f "$out/first-sight-$mode.done" ] && continue
  python3 $step --nets mobilenet_v2 --select $mode --db "$out/first-sight-$mode.db" --out "$out/first-sight-$mode.json" \
    $(resume "$out/first-sight-$mode.json") && touch "$out/first-sight-$mode.done"
done
python3 $step --nets "$nets" --select tune --out "$out/train-step.json" $(resume "$out/train-step.json")
