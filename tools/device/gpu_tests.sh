#!/usr/bin/env bash
# On the device machine: runs the named test binaries of build-dev (TANDEM_REQUIRE_GPU=1: a GPU test
# that would skip fails); logs and summary.txt under $OUT/tests. GTEST_ARGS is passed to each.
B=${B:-build-dev}
mkdir -p $OUT/tests
export TANDEM_TEST_DATA_DIR=$PWD/tests/fixtures TANDEM_REQUIRE_GPU=1
for t in "$@"; do
  f=$(find $B -type f -name "$t" -perm -u+x | head -1)
  [[ -n $f ]] || { echo "$t: MISSING" | tee -a $OUT/tests/summary.txt; continue; }
  s=$SECONDS
  timeout 300 $f ${GTEST_ARGS:-} > $OUT/tests/$t.log 2>&1; rc=$?
  echo "$t: rc=$rc $((SECONDS-s))s $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests/$t.log | tr '\n' ' ')" | tee -a $OUT/tests/summary.txt
done
