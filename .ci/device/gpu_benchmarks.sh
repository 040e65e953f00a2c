#!/usr/bin/env bash
# Run named benchmarks on a GPU machine, each within its own limit, its printout kept as $OUT/bench-NAME.log
# (the benchmarks print their figures; docs/measured.md records them with the GPU and commit):
#   .ci/device/gpu_benchmarks.sh stages load_inline sandbox export scaling scaling_ray baseline2 baseline3
# In the background, polled by later calls, as the GPU specification's parts are:
#   setsid .ci/device/gpu_benchmarks.sh stages export > /tmp/b/run.log 2>&1 &   (OUT=/tmp/b)
# KernelBench is read from $KERNELBLASTER_KERNELBENCH (a writable copy carried beside the repository).
# `scaling` needs two GPUs; `baseline2` and `baseline3` compare with KernelBench's published H100 times, so run
# them on an H100 (with two, `--gpus 0,1` halves their time). A level takes longer than a session's device time
# may allow: PROBLEMS=1-50 (bench baseline's --problems) runs a part of it, into a folder named for the part.
set -uo pipefail
out=${OUT:?set OUT to the folder the logs go to}
kernelbench=${KERNELBLASTER_KERNELBENCH:-../shared/kernelbench}
gpus=$(python3 -c "import torch; print(','.join(map(str, range(torch.cuda.device_count()))))")
declare -A limit command
limit[stages]=900 command[stages]="python3 benchmarks/eval_stages.py --repeats 5"
limit[load_inline]=900 command[load_inline]="python3 benchmarks/harness_vs_load_inline.py --repeats 3"
limit[sandbox]=600 command[sandbox]="python3 benchmarks/sandbox_overhead.py --repeats 7"
limit[export]=1500 command[export]="python3 benchmarks/export_timing.py --kernelbench"
limit[scaling]=1800 command[scaling]="python3 benchmarks/suite_scaling.py --repeats 2"
# The same and a local Ray cluster of both GPUs; Ray travels in parts first (.ci/device/ray_parts.sh).
limit[scaling_ray]=2400 command[scaling_ray]="python3 benchmarks/suite_scaling.py --repeats 2 --ray"
part=${PROBLEMS:+ --problems $PROBLEMS} suffix=${PROBLEMS:+-$PROBLEMS}
limit[baseline2]=3600 command[baseline2]="python3 -m kernelblaster.graph bench baseline $kernelbench --level 2$part
  --precision pytorch-default --gpus $gpus --out $out/baseline-level2$suffix"
limit[baseline3]=3600 command[baseline3]="python3 -m kernelblaster.graph bench baseline $kernelbench --level 3$part
  --precision pytorch-default --gpus $gpus --out $out/baseline-level3$suffix"
[ "$#" -gt 0 ] || { echo "usage: $0 NAME... (names: ${!command[*]})" >&2; exit 2; }
for name in "$@"; do
  [ -n "${command[$name]:-}" ] || { echo "$0: no benchmark named $name (names: ${!command[*]})" >&2; exit 2; }
done
status=0
for name in "$@"; do
  started=$(date +%s)
  # shellcheck disable=SC2086  # the command is words
  timeout --signal=INT --kill-after=60 "${limit[$name]}" ${command[$name]} > "$out/bench-$name.log" 2>&1
  code=$?
  echo "$name: exit $code after $(( $(date +%s) - started )) s"
  tail -12 "$out/bench-$name.log"
  [ "$code" -eq 0 ] || status=1
done
exit "$status"
