#!/usr/bin/env bash
# The readers' fuzz targets (tests/fuzz, docs/fuzzing.md): configures and builds build-fuzz/ with clang,
# libFuzzer, ASan and UBSan, then runs every target for the suite's bounded time (ctest -L fuzz, 8 s
# each), or with SECONDS given, each target for that long, one after the other, printing its totals.
#   scripts/fuzz.sh            # the bounded run
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh 300 [name] # 5 minutes per target (or only fuzz_<name>); inputs it finds stay in
#                              # build-fuzz/fuzz-corpus/<name>, crashes in build-fuzz/fuzz-artifacts/
set -euo pipefail
cd "$(dirname "$0")/.."
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > /tmp/tandem-fuzz-probe.$$.cpp
if ! clang++ -fsanitize=fuzzer,address,undefined /tmp/tandem-fuzz-probe.$$.cpp -o /tmp/tandem-fuzz-probe.$$ 2>/dev/null; then
  rm -f /tmp/tandem-fuzz-probe.$$*
  echo "fuzz: clang++ with libFuzzer is missing: install clang and libclang-rt-<version>-dev (TANDEM_FUZZ=1 scripts/setup.sh does)" >&2
  exit 1
fi
rm -f /tmp/tandem-fuzz-probe.$$*
if [[ ! -f build-fuzz/CMakeCache.txt ]]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=OFF -DTANDEM_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
fi
cmake --build build-fuzz --target fuzz -j "$(nproc)"
[[ ${1:-} == --build-only ]] && exit 0
if (($# == 0)); then
  exec ctest --test-dir build-fuzz -L fuzz --output-on-failure -j "$(nproc)"
fi
seconds=$1
names=${2:-gguf safetensors exl3 profile tokenizer chat_template nvfp4 mlx}
for n in $names; do
  mkdir -p "build-fuzz/fuzz-corpus/$n" build-fuzz/fuzz-artifacts
  echo "fuzz: fuzz_$n for $seconds s"
  build-fuzz/bin/fuzz_"$n" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/fuzz-artifacts/$n-" "build-fuzz/fuzz-corpus/$n" "tests/fuzz/corpus/$n" \
    2> "build-fuzz/fuzz-$n.log" || { tail -40 "build-fuzz/fuzz-$n.log" >&2; exit 1; }
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)' "build-fuzz/fuzz-$n.log" || true
  grep -E '#[0-9]+[[:space:]]+DONE' "build-fuzz/fuzz-$n.log" | tail -1 || true
done
