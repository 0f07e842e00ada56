#!/usr/bin/env bash
# The LiLiCorr oracle (issue #20; shared/spec/lilicorr.md, oracle plan) in one run on the GPU machine,
# from the repository root, after tandem is built there (tools/device/build.sh [--target test_spec_lilicorr]):
#   1. tandem side: LilicorrOracle.DumpInputs synthesizes the random LiLiCorr checkpoint for the tiny
#      fixture target (tests/fixtures/hf/latent), takes the target's greedy continuation of a prompt and
#      its taps, runs the drafter over two schedules (natural and forced partial acceptances) and writes
#      $OUT/dump/{inputs.safetensors,drafter/};
#   2. reference side: tools/reference/lilicorr_ref.py runs z-lab's DFlash forward and the TensorRT-LLM
#      and Model-Optimizer LiLiCorr heads (sources in REF_DIR, never committed) on those inputs, on the
#      CPU (the vectors to commit) and, when torch sees a GPU, once more on it;
#   3. compare: LilicorrOracle.MatchesTheReference against each, output in $OUT/compare*.txt.
# Commit $OUT/reference.safetensors as tests/fixtures/lilicorr/reference.safetensors (README there).
# Usage: tools/reference/lilicorr_oracle.sh [BUILD_DIR (build-dev)] [REF_DIR (.dev/ref)]; env OUT, PYTHON.
set -euo pipefail
BUILD=${1:-build-dev}
REF=${2:-.dev/ref}
OUT=${OUT:-/tmp/lilicorr-oracle}
PY=${PYTHON:-python3}
BIN=$BUILD/bin/test_spec_lilicorr
[ -x "$BIN" ] || { echo "lilicorr_oracle: $BIN not found: build it first (tools/device/build.sh --target test_spec_lilicorr)" >&2; exit 1; }
for f in dflash/model.py trtllm/modeling_lilicorr.py modelopt/modeling_lilicorr.py; do
  [ -f "$REF/$f" ] || { echo "lilicorr_oracle: reference source $REF/$f is missing (carry $REF to this machine)" >&2; exit 1; }
done
mkdir -p "$OUT/dump"
rm -rf "$OUT/dump/drafter" "$OUT/dump/inputs.safetensors"

echo "== 1. tandem: inputs"
TANDEM_LILICORR_DUMP="$OUT/dump" "$BIN" --gtest_filter=LilicorrOracle.DumpInputs 2>&1 | tee "$OUT/dump.txt"
[ -f "$OUT/dump/inputs.safetensors" ] || { echo "lilicorr_oracle: the dump wrote no inputs.safetensors" >&2; exit 1; }

echo "== 2. reference: $("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())')"
"$PY" tools/reference/lilicorr_ref.py --ref-dir "$REF" --inputs "$OUT/dump/inputs.safetensors" \
  --drafter "$OUT/dump/drafter" --out "$OUT/reference.safetensors" --summary "$OUT/summary.json" --device cpu
refs=("$OUT/reference.safetensors")
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  "$PY" tools/reference/lilicorr_ref.py --ref-dir "$REF" --inputs "$OUT/dump/inputs.safetensors" \
    --drafter "$OUT/dump/drafter" --out "$OUT/reference_cuda.safetensors" --summary "$OUT/summary_cuda.json" --device cuda
  refs+=("$OUT/reference_cuda.safetensors")
fi

echo "== 3. compare"
rc=0
for r in "${refs[@]}"; do
  name=$(basename "$r" .safetensors)
  TANDEM_LILICORR_REF="$r" "$BIN" --gtest_filter=LilicorrOracle.MatchesTheReference 2>&1 | tee "$OUT/compare_$name.txt" \
    | grep -E "vs reference|Failure|OK|FAILED|Skipped" | head -40 || true
  grep -q "\[       OK \] LilicorrOracle.MatchesTheReference" "$OUT/compare_$name.txt" || rc=1
done
rm -rf "$OUT/dump/drafter"  # tandem re-synthesizes it from the seed; only the vectors come back
echo "lilicorr_oracle: $([ $rc = 0 ] && echo "tandem matches the reference" || echo "MISMATCH (see $OUT/compare_*.txt)"); vectors in $OUT"
exit $rc
