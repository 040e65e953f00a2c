#!/usr/bin/env bash
# Run parts of the GPU specification (.ci/device/gpu_parts.sh names them) as parallel streams, one per GPU,
# in the background, so a machine of several GPUs runs the whole of `pytest -m gpu` in a fraction of the
# time and successive calls of at most 10 minutes only poll it:
#   .ci/device/gpu_streams.sh start LOGDIR 0:harness,prompt_facts 1:hostile,bench,lifetime,human_cli_snippets
#   .ci/device/gpu_streams.sh wait LOGDIR SECONDS     (prints each part's result; exit 0 once all ended)
# A stream runs its parts one after another with CUDA_VISIBLE_DEVICES set to its GPU; each part's log and
# JUnit XML go to LOGDIR as gpu_tests.sh writes them, and LOGDIR/STREAM.done marks a stream that ended.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  start)
    logdir=$2; shift 2
    mkdir -p "$logdir"
    for stream in "$@"; do
      gpu=${stream%%:*} parts=${stream#*:}
      # setsid: the stream outlives the call that started it, until the machine is given back.
      OUT=$logdir CUDA_VISIBLE_DEVICES=$gpu setsid bash -c \
        "'$here/gpu_parts.sh' ${parts//,/ } > '$logdir/stream-$gpu.log' 2>&1; echo \$? > '$logdir/stream-$gpu.done'" \
        < /dev/null > /dev/null 2>&1 &
      echo "stream on GPU $gpu: $parts"
    done ;;
  wait)
    logdir=$2 limit=$3 started=$(date +%s)
    while (( $(date +%s) - started < limit )); do
      streams=$(ls "$logdir"/stream-*.log 2>/dev/null | wc -l) ended=$(ls "$logdir"/stream-*.done 2>/dev/null | wc -l)
      (( streams > 0 && ended == streams )) && break
      sleep 10
    done
    cat "$logdir"/stream-*.log
    for done in "$logdir"/stream-*.done; do [ -e "$done" ] && echo "$(basename "$done" .done): exit $(cat "$done")"; done
    streams=$(ls "$logdir"/stream-*.log 2>/dev/null | wc -l) ended=$(ls "$logdir"/stream-*.done 2>/dev/null | wc -l)
    (( streams > 0 && ended == streams )) ;;
  *) echo "usage: $0 start LOGDIR GPU:PART[,PART]... | wait LOGDIR SECONDS" >&2; exit 2 ;;
esac
