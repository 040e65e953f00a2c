#!/usr/bin/env bash
# Run parts of the GPU specification (.ci/device/gpu_parts.sh names them) in the background, as streams of
# parts, so that the whole of `pytest -m gpu` outlasts the 10 minutes of one call and later calls only poll:
#   .ci/device/gpu_streams.sh start LOGDIR 0:harness,honest 1:export,checkers 2:hostile,bench,lifetime 3:prompt_facts,human_cli_snippets
#   .ci/device/gpu_streams.sh wait LOGDIR SECONDS     (prints each part's result; exit 0 once all ended)
# Give the specification one stream per host. Two streams on two H200s of one host (at f4df75e) failed 5
# honest tests that pass alone: ncu profiles one process per host at a time (the harness now waits for
# it: harness/profile/run.py), and the timing cross-check failed honest kernels while the other GPU was
# busy. Several streams suit work that neither profiles nor times.
# A stream runs its parts one after another with CUDA_VISIBLE_DEVICES set to its GPU; each part's log and
# JUnit XML go to LOGDIR as gpu_tests.sh writes them, and LOGDIR/STREAM.done marks a stream that ended.
# The streams run on a copy of the repository (LOGDIR/tree, importing the project from there): each later
# call sends the working tree again, and at 1b74b64 tests that read a file while it did failed, not found.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case "${1:-}" in
  start)
    logdir=$2; shift 2
    mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd) tree=$logdir/tree
    [[ "$logdir/" == "$root"/* ]] && { echo "$0: LOGDIR must be outside the repository ($root)" >&2; exit 2; }
    mkdir -p "$tree" && cp -a "$root/." "$tree/"
    # KernelBench carried beside the repository is read from the copy too.
    kernelbench=${KERNELBLASTER_KERNELBENCH:-}
    [[ "$kernelbench" == "$root"/* ]] && export KERNELBLASTER_KERNELBENCH=$tree/${kernelbench#"$root"/}
    for stream in "$@"; do
      gpu=${stream%%:*} parts=${stream#*:}
      # setsid: the stream outlives the call that started it, until the machine is given back. The redirection
      # covers the whole background list: the subshell bash forks for it would otherwise hold this script's
      # output open until the stream ends (a caller reading it through a pipe waited for the whole run).
      (cd "$tree" && OUT=$logdir CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$tree/typecheck setsid bash -c \
        "'$tree/.ci/device/gpu_parts.sh' ${parts//,/ } > '$logdir/stream-$gpu.log' 2>&1; echo \$? > '$logdir/stream-$gpu.done'" &
      ) < /dev/null > /dev/null 2>&1
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
