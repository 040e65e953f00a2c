#!/usr/bin/env bash
# Run part of the GPU specification within a time limit, keeping its log and JUnit XML under $OUT.
#   .ci/device/gpu_tests.sh LIMIT_S NAME TEST_PATH...
# KernelBench is read from $KERNELBLASTER_KERNELBENCH (carry a writable copy of ../shared/kernelbench, e.g.
# `cp -r ../shared/kernelbench .kernelbench && chmod -R u+w .kernelbench`: a read-only one did not arrive); the first lowering prompt of the GPU --llm human run is kept in $OUT/prompts/lowering.md.
set -uo pipefail
limit=$1 name=$2
shift 2
out=${OUT:?set OUT to the folder the logs go to}
export KERNELBLASTER_PROMPT_OUT="$out/prompts"
started=$(date +%s)
# SIGINT at the limit, not SIGTERM: pytest then still prints the failures it has seen (a part killed at
# b79b7db lost every message).
timeout --signal=INT --kill-after=60 "$limit" python3 -m pytest -m gpu -v -p no:cacheprovider --durations=25 --junitxml="$out/$name.xml" "$@" \
  > "$out/$name.log" 2>&1
status=$?
echo "$name: exit $status after $(( $(date +%s) - started )) s"
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$out/$name.log" | tail -15
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  # pytest -v names a test as it starts it: the last one named without a result is the one time ran out in.
  echo "$name: out of time; $(grep -cE ' (PASSED|FAILED|ERROR|SKIPPED)' "$out/$name.log") tests had finished," \
       "the last started was: $(grep -oE '^[^ ]+::[^ ]+' "$out/$name.log" | tail -1)"
fi
exit "$status"
