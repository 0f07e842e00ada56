#!/usr/bin/env bash
# On the device machine: tandem and llama.cpp side by side on synthetic GGUF ladder files, one type at
# a time (a Bolt-shape file of one type is 17–60 GB: only one sits on the disk at once).
#
#   tools/device/ladder_side_by_side.sh OUT_DIR TYPE [TYPE ...]
#
# TYPE as `tandem synth --mix gguf-TYPE` takes it (q4_k, iq4_xs, iq2_xs, …). Per type: `tandem synth
# --shape bolt --uniform --mix gguf-TYPE`, then `tandem bench` (prefill $PREFILL, $DECODE decoded
# tokens) and `llamacpp.sh bench` (pp$PREFILL, tg$DECODE) on the same file, back to back; logs
# OUT_DIR/tandem_TYPE.txt and OUT_DIR/llama_TYPE.txt, one line per type in OUT_DIR/ladder.txt. Needs
# build-dev (tools/device/build.sh) and llama.cpp built by the anchors' llamacpp.sh (LLAMACPP: its
# path, default .dev/anchors/llamacpp.sh; its build folder /tmp/llamacpp). The file goes to $TMPDIR.
set -u
out=${1:?usage: ladder_side_by_side.sh OUT_DIR TYPE [TYPE ...]}
shift
[[ $# -gt 0 ]] || { echo "ladder_side_by_side.sh: name at least one type" >&2; exit 2; }
L=${LLAMACPP:-.dev/anchors/llamacpp.sh}
T=${TANDEM:-build-dev/bin/tandem}
PREFILL=${PREFILL:-8192}
DECODE=${DECODE:-64}
mkdir -p "$out"
for ty in "$@"; do
  f=${TMPDIR:-/tmp}/ladder_$ty.gguf
  if ! "$T" synth --shape bolt --uniform --mix "gguf-$ty" --out "$f" > "$out/synth_$ty.txt" 2>&1; then
    echo "$ty: synth failed (see synth_$ty.txt)" | tee -a "$out/ladder.txt"
    rm -f "$f"
    continue
  fi
  "$T" bench --model "$f" --device cuda --no-profile --decode-tokens "$DECODE" --prefill "$PREFILL" \
    --verify-max 1 > "$out/tandem_$ty.txt" 2>&1
  bash "$L" bench "$f" -p "$PREFILL" -n "$DECODE" -r 1 > "$out/llama_$ty.txt" 2>&1
  tp=$(grep -oE "prefill \(chunk [0-9]+\) +$PREFILL: [0-9]+" "$out/tandem_$ty.txt" | grep -oE "[0-9]+$")
  td=$(grep -oE "^  decode +[0-9.]+" "$out/tandem_$ty.txt" | grep -oE "[0-9.]+$")
  lp=$(grep -E "pp$PREFILL" "$out/llama_$ty.txt" | grep -oE "[0-9]+\.[0-9]+ ± " | head -1 | grep -oE "^[0-9.]+")
  ld=$(grep -E "tg$DECODE" "$out/llama_$ty.txt" | grep -oE "[0-9]+\.[0-9]+ ± " | head -1 | grep -oE "^[0-9.]+")
  ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }' || echo "?"; }
  echo "$ty: prefill $PREFILL tandem ${tp:-?} llama ${lp:-?} ($(ratio "$tp" "$lp")); decode tandem ${td:-?} llama ${ld:-?} ($(ratio "$td" "$ld"))" |
    tee -a "$out/ladder.txt"
  rm -f "$f"
done
