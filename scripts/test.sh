#!/usr/bin/env bash
# Runs the whole test suite through CTest. Tests labelled "gpu" skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d build ]] || { echo "test: no build/ — run scripts/setup.sh first" >&2; exit 1; }
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
