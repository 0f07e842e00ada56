#!/usr/bin/env bash
# On the device machine: runs groups of GPU test binaries side by side (one H200 holds them all),
# each group in order through gpu_tests.sh; logs under $OUT/tests/gN/, one summary at the end.
#   tools/device/parallel_tests.sh "test_exl3_cuda test_cuda_backend" "test_gguf_cuda test_gemv_tc_cuda" ...
# A group's wall time is the sum of its binaries (test_exl3_cuda alone takes ~160 s): balance them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/tests"
i=0
for g in "$@"; do
  i=$((i + 1))
  mkdir -p "$OUT/tests/g$i"
  (OUT=$OUT/tests/g$i bash "$here/gpu_tests.sh" $g > /dev/null 2>&1) &
done
wait
cat "$OUT"/tests/g*/tests/summary.txt | tee "$OUT/tests/summary.txt"
! grep -q "rc=[1-9]\|MISSING" "$OUT/tests/summary.txt"
