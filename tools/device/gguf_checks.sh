#!/usr/bin/env bash
# On the device machine: the GGUF kernels' GPU checks and timings after a change to formats/gguf, in
# one call (~8 min with the build): test_gguf_cuda_decode and test_gguf_cuda (every type's GEMV,
# prefill GEMM in every block tiling, grouped gather), compute-sanitizer memcheck on the prefill GEMM
# and gather of the types named in MEMCHECK (default: one of each decoder family), then
# bench_gguf_cuda --prefill. Logs under $OUT (tests.txt, memcheck.txt, bench_prefill.txt); a failing
# test or memcheck error makes the exit status non-zero. Needs build-dev (tools/device/build.sh).
#   tools/device/gguf_checks.sh            # then e.g. tools/device/ladder_side_by_side.sh $OUT/ladder q4_k
set -u
B=${B:-build-dev/bin}
MEMCHECK=${MEMCHECK:-Q4_K IQ3_S IQ2_XS IQ1_M IQ4_XS Q6_K}
export TANDEM_TEST_DATA_DIR=$PWD/tests/fixtures TANDEM_REQUIRE_GPU=1
rc=0
{ for t in test_gguf_cuda_decode test_gguf_cuda; do echo "== $t"; timeout 300 $B/$t; echo "rc=$?"; done; } > $OUT/tests.txt 2>&1
grep -E "^== |^rc=|^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.txt
grep -q "^rc=[1-9]" $OUT/tests.txt && rc=1
: > $OUT/memcheck.txt
for t in $MEMCHECK; do  # the test runs every block tiling itself (1, 2 and 4 warp rows)
  echo "== $t" >> $OUT/memcheck.txt
  timeout 150 compute-sanitizer --tool memcheck $B/test_gguf_cuda \
    --gtest_filter="Types/GgufGemm.MatchesCpu*/$t:Types/GgufGemm.GroupedGather*/$t" >> $OUT/memcheck.txt 2>&1 || rc=1
done
grep -E "^== |ERROR SUMMARY" $OUT/memcheck.txt | paste - - | sed 's/=========//'
grep "ERROR SUMMARY" $OUT/memcheck.txt | grep -vq " 0 errors" && rc=1
timeout 200 $B/bench_gguf_cuda --prefill > $OUT/bench_prefill.txt 2>&1
grep -E "TFLOP|GB/s" $OUT/bench_prefill.txt
exit $rc
