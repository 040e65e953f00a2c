#!/usr/bin/env bash
# Run named parts of the GPU specification one after another, each within its own limit, so that the whole
# of `pytest -m gpu` runs in parts (tests/cpu/test_ci_device.py keeps every GPU test file in one):
#   .ci/device/gpu_parts.sh harness checkers hostile honest export bench lifetime prompt_facts human_cli_snippets
# or in the background, polled by later calls: .ci/device/gpu_streams.sh. Logs and JUnit XML go to $OUT as
# gpu_tests.sh writes them. The limits are backstops: at b79b7db the harness part ran out of 900 s and
# prompt_facts out of 500 s (two streams on one host, 2 x H200), and a killed part loses its messages.
set -uo pipefail
declare -A limit paths
# harness (430 s on an H100 at 1b74b64) and checkers (150 s) were one part; two let four GPUs share the whole.
limit[harness]=1500 paths[harness]="tests/gpu/test_harness_gpu.py"
limit[checkers]=600 paths[checkers]="tests/gpu/test_sandbox_gpu.py tests/gpu/test_sanitizer_gpu.py
  tests/gpu/test_machine_gpu.py tests/cpu/test_driver_executable.py tests/gpu/test_stage_times_gpu.py
  tests/gpu/test_reserve_order_gpu.py tests/gpu/test_cuda_device_gpu.py tests/gpu/test_baseline_cache_gpu.py
  tests/gpu/test_profile_concurrency_gpu.py"
limit[hostile]=300 paths[hostile]="tests/hostile"
limit[honest]=600 paths[honest]="tests/gpu/test_honest_checks_gpu.py"
limit[export]=1200 paths[export]="tests/gpu/test_export_gpu.py"
limit[bench]=400 paths[bench]="tests/gpu/test_bench_gpu.py"
limit[lifetime]=300 paths[lifetime]="tests/gpu/test_lifetime_gpu.py tests/gpu/test_optimize_e2e.py"
limit[prompt_facts]=900 paths[prompt_facts]="tests/gpu/test_prompt_facts_gpu.py"
limit[human_cli_snippets]=500 paths[human_cli_snippets]="tests/gpu/test_human_run_gpu.py tests/gpu/test_cli_gpu.py
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
