#!/usr/bin/env bash
# Run named parts of the GPU specification one after another, each within its own limit, so that the whole
# of `pytest -m gpu` fits in calls of at most 10 minutes:
#   .ci/device/gpu_parts.sh harness                                  (one call)
#   .ci/device/gpu_parts.sh hostile bench lifetime                   (another)
#   .ci/device/gpu_parts.sh prompt_facts                             (a third)
#   .ci/device/gpu_parts.sh human_cli_snippets                       (a fourth)
# Wall time of each part on an NVIDIA H100 80GB HBM3 at 1417f58: harness 440 s, hostile 71 s, bench 223 s,
# lifetime 123 s, prompt_facts and human_cli_snippets about 300 s each (KernelBench's 6 GiB ReLU dominates
# the first). Logs and JUnit XML go to $OUT as gpu_tests.sh writes them.
set -uo pipefail
declare -A limit paths
limit[harness]=540 paths[harness]="tests/gpu/test_harness_gpu.py tests/gpu/test_sandbox_gpu.py
  tests/gpu/test_sanitizer_gpu.py tests/cpu/test_driver_executable.py"
limit[hostile]=120 paths[hostile]="tests/hostile"
limit[bench]=300 paths[bench]="tests/gpu/test_bench_gpu.py"
limit[lifetime]=170 paths[lifetime]="tests/gpu/test_lifetime_gpu.py tests/gpu/test_optimize_e2e.py"
limit[prompt_facts]=400 paths[prompt_facts]="tests/gpu/test_prompt_facts_gpu.py"
limit[human_cli_snippets]=400 paths[human_cli_snippets]="tests/gpu/test_human_run_gpu.py tests/gpu/test_cli_gpu.py
  tests/gpu/test_kb_snippets_gpu.py"
[ "$#" -gt 0 ] || { echo "usage: $0 PART... (parts: ${!paths[*]})" >&2; exit 2; }
for part in "$@"; do
  [ -n "${paths[$part]:-}" ] || { echo "$0: no part named $part (parts: ${!paths[*]})" >&2; exit 2; }
done
status=0
for part in "$@"; do
  # shellcheck disable=SC2086  # the paths are words
  "$(dirname "$0")/gpu_tests.sh" "${limit[$part]}" "$part" ${paths[$part]} || status=1
done
exit "$status"
