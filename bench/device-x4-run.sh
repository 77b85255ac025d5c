#!/usr/bin/env bash
# One call on a 4-GPU machine: the Python package's seven-network table on GPUs 0-2 and the GPU
# tests (every packed test executable's, then the package's) on GPU 3, each job pinned to its own cores so that none slows another's host-bound
# steps; everything comes back as $OUT/r.tgz. Prepare here:
#
#   ../shared/tools/device-pack            # release binaries and test executables in .device/
#   rm .device/tests/gconv_onnx-* && gzip -9 .device/bin/* .device/tests/*   # within the carry limit
#   maturin build --release -m crates/gconv-py/Cargo.toml -o .device/wheels
#
# then run `bench/device-x4-run.sh` on the machine, carrying .device. LIMIT (seconds, default
# 540) bounds every job, within the call's own limit.
set -u
cd "$(dirname "$0")/.."
for f in .device/bin/*.gz .device/tests/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
chmod +x .device/bin/* .device/tests/*
source bench/device-python-env.sh
r=/tmp/r
mkdir -p $r
step=bench/torch_train_step.py
limit=${LIMIT:-540}
pin() { command -v taskset >/dev/null && echo "taskset -c $1"; }
job() { local gpu=$1 cores=$2; shift 2; CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" $(pin "$cores") bash -c "$*"; }
job 0 0-12 "python3 $step --overhead --nets resnet50,inception_v3 --out $r/step-a.json > $r/step-a.log 2>&1" &
job 1 13-25 "python3 $step --nets mobilenet_v2,efficientnet_b0,squeezenet1_1 --out $r/step-b.json > $r/step-b.log 2>&1" &
job 2 26-39 "python3 $step --nets resnext50_32x4d,convnext_tiny --out $r/step-c.json > $r/step-c.log 2>&1" &
job 3 40-63 "(time .device/run-tests gpu) > $r/gpu-tests.log 2>&1; cd crates/gconv-py && (time python3 -m pytest -q -rs tests/) > $r/pytest.log 2>&1" &
wait
tar czf "$OUT/r.tgz" -C /tmp r
keep_gconv_db
