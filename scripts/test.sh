#!/usr/bin/env bash
# Runs the whole test suite through CTest. Tests labelled "gpu" skip themselves without a GPU. Where a
# fuzz build exists (build-fuzz/, from scripts/fuzz.sh or TANDEM_FUZZ=1 scripts/setup.sh), the whole
# suite also runs the readers' bounded fuzz run (ctest -L fuzz there, about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d build ]] || { echo "test: no build/ — run scripts/setup.sh first" >&2; exit 1; }
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
if (($# == 0)) && [[ -f build-fuzz/CMakeCache.txt ]]; then
  scripts/fuzz.sh
fi
