#!/bin/bash
# The GPU suite and side-by-side decode/prefill figures on the device machine, from build trees
# carried there (bin/ and lib/ of a CUDA build, plus the Debian runtime libraries in libs/):
#   tools/gpu_suite.sh tests BUILD            every GPU test binary of BUILD/bin, TANDEM_REQUIRE_GPU=1
#   tools/gpu_suite.sh bench BUILD_A BUILD_B  `tandem bench` on the Bolt shapes, A and B alternating
# Logs land in $OUT (default /tmp/out). REPS (default 2) alternations; MIXES (default "exl3-2
# gguf-iq2"); BENCH_ARGS replaces the default bench flags.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -d "${LIBS:-.dev/libs}" ] && export LD_LIBRARY_PATH=$PWD/${LIBS:-.dev/libs}:${LD_LIBRARY_PATH:-}
export TANDEM_TEST_DATA_DIR=$PWD/tests/fixtures TANDEM_REQUIRE_GPU=1
tests="test_cuda_backend test_exl3_cuda test_gguf_cuda test_conformance_cuda test_speculate_cuda test_graphs_cuda
       test_mamba2_cuda test_safetensors_cuda test_taps_cuda test_nvfp4_cuda test_mlx_cuda"
case "${1:-}" in
  tests)
    b=$2
    export TANDEM_TEST_BINARY_DIR=$b  # the plugins: $b/lib/tandem/plugins
    failed=0
    for t in $tests; do
      [ -x "$b/bin/$t" ] || { echo "== $t: not in $b/bin"; continue; }
      start=$(date +%s)
      timeout "${LIMIT:-300}" "$b/bin/$t" --gtest_brief=1 >"$OUT/$(basename "$b")_$t.log" 2>&1
      rc=$?
      echo "== $t rc=$rc $(($(date +%s) - start)) s $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$(basename "$b")_$t.log" | tr '\n' ' ')"
      if [ $rc -ne 0 ]; then
        failed=$((failed + 1))
        grep -E "FAILED|Failure|rror" "$OUT/$(basename "$b")_$t.log" | head -8
      fi
    done
    echo "== $failed test binaries failed"
    [ $failed -eq 0 ] ;;
  bench)
    a=$2 b=$3
    args=${BENCH_ARGS:---device cuda --decode-tokens 256 --prefill 512,4096 --no-profile}
    for rep in $(seq "${REPS:-2}"); do
      for mix in ${MIXES:-exl3-2 gguf-iq2}; do
        for build in "$a" "$b"; do
          name=$(basename "$build")_${mix}_$rep
          timeout "${LIMIT:-200}" "$build/bin/tandem" bench --synth bolt --mix "$mix" $args --json "$OUT/$name.json" \
            >"$OUT/$name.txt" 2>"$OUT/$name.log"
          echo "== $name rc=$? $(grep -E '^  (decode|prefill)' "$OUT/$name.txt" | tr -s ' ' | tr '\n' ';')"
        done
      done
    done ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
