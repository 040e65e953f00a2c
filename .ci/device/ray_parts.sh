#!/usr/bin/env bash
# Ray's wheel (79 MB for Python 3.12) is larger than all that may travel with one device call (64 MiB with
# the working tree), so it travels in parts, one call each, onto a machine kept warm, and is joined there:
#   here:   .ci/device/ray_parts.sh split             -> .whl-ray-1 .whl-ray-2 (ignored folders, under 40 MiB)
#   there:  .ci/device/ray_parts.sh keep .whl-ray-1   (a call that carries .whl-ray-1; then the same for -2)
#   there:  .ci/device/ray_parts.sh install           (after the last part: join, check, install)
# The parts wait in /tmp/ray-parts on the device machine, which outlives a call while it is warm.
set -euo pipefail
parts=/tmp/ray-parts
case "${1:-}" in
  split)
    work=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$work" ray msgpack
    wheel=$(ls "$work"/ray-*.whl)
    rm -rf .whl-ray-1 .whl-ray-2 && mkdir .whl-ray-1 .whl-ray-2
    (cd "$work" && sha256sum "$(basename "$wheel")" > ray.sha256 && split -b 38m -d "$(basename "$wheel")" ray.part.)
    mv "$work"/ray.part.00 "$work"/ray.sha256 .whl-ray-1/
    mv "$work"/ray.part.* "$work"/msgpack-*.whl .whl-ray-2/
    rm -rf "$work"
    du -sh .whl-ray-1 .whl-ray-2 ;;
  keep)
    mkdir -p "$parts" && cp "${2:?which part folder}"/* "$parts"/ && ls -l "$parts" ;;
  install)
    cd "$parts"
    wheel=$(cut -d' ' -f3 ray.sha256)
    cat ray.part.* > "$wheel"
    sha256sum --check --quiet ray.sha256 || { echo "ray_parts: the joined wheel's checksum differs" >&2; exit 1; }
    python3 -m pip install -q --no-index --no-deps "$wheel" msgpack-*.whl 2>&1 | grep -iv warning || true
    ray --version ;;
  *) echo "usage: $0 split | keep PART_FOLDER | install" >&2; exit 2 ;;
esac
