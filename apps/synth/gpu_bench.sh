#!/bin/bash
# The GPU benchmarks of docs/benchmarks.md, from a build tree carried to the device machine:
#   TANDEM_COMMIT=<sha> BUILD=build-cuda2 tools/synth/gpu_bench.sh [extra bench flags]
# Each run's table, log and JSON land in $OUT (default /tmp/out); LIMIT caps a run's seconds.
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-cuda2}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -d .devlibs ] && export LD_LIBRARY_PATH=$PWD/.devlibs:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader
nproc; free -g | head -2
$BUILD/bin/tandem plugins | grep -i cuda
run() {
  local name=$1
  shift
  local start=$(date +%s)
  timeout "${LIMIT:-200}" "$BUILD/bin/tandem" bench "$@" --device cuda --json "$OUT/$name.json" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  echo "== $name rc=$? $(($(date +%s) - start)) s"
  cat "$OUT/$name.txt"
  grep -iE "error|warn" "$OUT/$name.log" | head -5
}
for spec in ${BENCHES:-bolt_iq2 bolt_uniform_iq2 nano_bf16}; do
  case $spec in
    bolt_iq2) run bolt_iq2 --synth bolt --mix gguf-iq2 "$@" ;;
    bolt_uniform_iq2) run bolt_uniform_iq2 --synth bolt --uniform --mix gguf-iq2 "$@" ;;
    nano_bf16) run nano_bf16 --synth nano --mix bf16 "$@" ;;
    bolt_exl3) run bolt_exl3 --synth bolt --mix exl3-2 "$@" ;;
  esac
done
