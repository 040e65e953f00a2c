#!/usr/bin/env bash
# Run .ci/device/gpu_parts.sh PARTS, then benchmarks/export_timing.py, on one GPU, in the background stream
# layout of gpu_streams.sh (LOGDIR/stream-GPU.log and .done), so a poll sees both.
#   .ci/device/export_timing_after.sh LOGDIR GPU PART...
set -uo pipefail
logdir=$1 gpu=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
OUT=$logdir CUDA_VISIBLE_DEVICES=$gpu setsid bash -c \
  "'$here/gpu_parts.sh' $* > '$logdir/stream-$gpu.log' 2>&1; status=\$?;
   CUDA_VISIBLE_DEVICES=$gpu PYTHONUNBUFFERED=1 timeout 900 python3 '$here/../../benchmarks/export_timing.py' \
     > '$logdir/export_timing.txt' 2>&1; echo \$status > '$logdir/stream-$gpu.done'" < /dev/null > /dev/null 2>&1 &
