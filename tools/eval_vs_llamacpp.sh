#!/usr/bin/env bash
# `tandem eval` against llama.cpp's `llama-perplexity --kl-divergence` on one pair of GGUF files
# (issue #19; conventions in docs/eval.md § Checking against llama.cpp):
#
#   LLAMACPP_DIR=/tmp/llamacpp TANDEM=BUILD/bin/tandem tools/eval_vs_llamacpp.sh OUTDIR
#
# 1. base.gguf: `tandem synth --shape tiny --uniform --mix gguf-iq2` (random weights: IQ2_XXS, NVFP4, Q8_0).
#    --uniform: llama.cpp reads one expert count and width for all layers (tiny's default varies
#    them per layer, which it refuses: "expert_count has wrong type arr").
# 2. pack.gguf: `llama-quantize --allow-requantize base.gguf pack.gguf Q4_K_M` (Q4_K and Q6_K,
#    types tandem's GGUF plugin reads; llama-quantize is built in LLAMACPP_DIR/build when absent).
# 3. text.txt: README.md and docs/*.md of this checkout (~190 KB; the synthetic tokenizer has no
#    merges, one token per byte).
# 4. llama-perplexity on base.gguf writes base.kld (-c CTX --chunks CHUNKS), then on pack.gguf with
#    --kl-divergence reads it: "Mean PPL(Q)", "Mean PPL(base)", "Mean KLD", "Same top p".
# 5. tandem eval --model pack.gguf --ref-model base.gguf --rows CHUNKS --row-tokens CTX
#    --score-second-half (the second half of each row, as llama-perplexity scores).
# 6. A table of both and their relative differences; exit 1 when one exceeds TOL (default 0.01), or
#    when the scored token ids (base.kld's against tandem's --save-logits file) or counts differ.
#
# CHUNKS defaults to 64, not the cards' 8: the random model amplifies the engines' rounding (llama.cpp
# rounds activations to Q8_0/Q8_K or q8_1, tandem keeps f32), so ~13 % of positions change their
# likeliest token between the two engines on the same file. Both agree in expectation, but at 8
# chunks (2,040 positions) top-1's relative difference is ~2 % of noise; at 64 (16,320) ~0.7 %.
#
# Environment: LLAMACPP_DIR (default /tmp/llamacpp, built by .dev/anchors/llamacpp.sh build), TANDEM
# (default build/bin/tandem), DEVICE (tandem's, default cuda), NGL (llama.cpp's -ngl, default 99),
# PACK_TYPE (default Q4_K_M), SEED (synth, default 0), CTX (512), CHUNKS (64), TOL (0.01), LIMIT
# (seconds a command, default 300), WORK (the large files: default OUTDIR/work, removed at the end
# unless KEEP=1 or WORK is set). Logs, JSON and the table (table.txt) stay in OUTDIR.
set -euo pipefail
(($# == 1)) || { sed -n '2,30p' "$0"; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
llama=${LLAMACPP_DIR:-/tmp/llamacpp}
tandem=${TANDEM:-$repo/build/bin/tandem}
device=${DEVICE:-cuda} ngl=${NGL:-99} pack_type=${PACK_TYPE:-Q4_K_M} seed=${SEED:-0}
ctx=${CTX:-512} chunks=${CHUNKS:-64} tol=${TOL:-0.01} limit=${LIMIT:-300}
work=${WORK:-$out/work}
mkdir -p "$work"
bin=$llama/build/bin

# Every command printed, its output in OUTDIR/NAME.log, bounded by LIMIT; on failure the log's tail.
step() {
  local name=$1; shift
  printf '+ (%s.log)' "$name"; printf ' %q' "$@"; printf '\n'
  local t0=$SECONDS rc=0
  timeout "$limit" "$@" > "$out/$name.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    echo "eval_vs_llamacpp: '$name' failed (exit $rc$( ((rc == 124)) && echo ", past LIMIT=${limit}s")); its log's end:" >&2
    tail -n 25 "$out/$name.log" >&2
    exit 1
  fi
  echo "  done in $((SECONDS - t0)) s"
}

[[ -x $tandem ]] || { echo "eval_vs_llamacpp: TANDEM '$tandem' is not an executable" >&2; exit 1; }
for b in llama-perplexity; do
  [[ -x $bin/$b ]] || { echo "eval_vs_llamacpp: $bin/$b missing: run .dev/anchors/llamacpp.sh build $llama" >&2; exit 1; }
done
if [[ ! -x $bin/llama-quantize ]]; then
  step build_llama_quantize cmake --build "$llama/build" --target llama-quantize -j "$(nproc)"
fi
python3 -c 'import json, re, struct' || { echo "eval_vs_llamacpp: python3 is needed for the table" >&2; exit 1; }

# 1-3: the files.
rm -f "$work/base.gguf" "$work/pack.gguf" "$work/base.kld" "$work/pack.tlp"
step synth "$tandem" synth --shape tiny --uniform --mix gguf-iq2 --seed "$seed" --out "$work/base.gguf"
step quantize "$bin/llama-quantize" --allow-requantize "$work/base.gguf" "$work/pack.gguf" "$pack_type"
cat "$repo/README.md" "$repo"/docs/*.md > "$work/text.txt"
echo "+ cat README.md docs/*.md > $work/text.txt ($(wc -c < "$work/text.txt") bytes)"

# 4: llama.cpp. The KL run takes its tokens and chunk count from base.kld.
step llama_base "$bin/llama-perplexity" -m "$work/base.gguf" -f "$work/text.txt" -c "$ctx" --chunks "$chunks" \
  -ngl "$ngl" --kl-divergence-base "$work/base.kld"
step llama_kl "$bin/llama-perplexity" -m "$work/pack.gguf" -c "$ctx" -ngl "$ngl" \
  --kl-divergence-base "$work/base.kld" --kl-divergence

# 5: tandem; --save-logits only for its token ids (the file's header), compared with base.kld's.
step tandem_eval "$tandem" eval --model "$work/pack.gguf" --ref-model "$work/base.gguf" --text "$work/text.txt" \
  --rows "$chunks" --row-tokens "$ctx" --score-second-half --device "$device" --json "$out/tandem.json" \
  --save-logits "$work/pack.tlp"

# 6: the table.
rc=0
python3 - "$out" "$work" "$tol" "$pack_type" "$device" <<'EOF' | tee "$out/table.txt" || rc=$?
import json, re, struct, sys
out, work, tol, pack_type, device = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
fails = []

def grab(log, pattern):
    text = open(f"{out}/{log}.log", errors="replace").read()
    m = re.search(pattern, text, re.M)
    if not m:
        sys.exit(f"eval_vs_llamacpp: no line matching {pattern!r} in {out}/{log}.log")
    return m.group(1)

num = r"\s*:?\s*(-?[0-9.]+(?:e[-+]?[0-9]+)?)"
ll = {"ppl": float(grab("llama_kl", r"^Mean PPL\(Q\)" + num)),
      "ref_ppl": float(grab("llama_kl", r"^Mean PPL\(base\)" + num)),
      "kl": float(grab("llama_kl", r"^Mean\s+KLD:" + num)),
      "top1": float(grab("llama_kl", r"^Same top p:" + num))}
t = json.load(open(f"{out}/tandem.json"))
tm = {"ppl": t["perplexity"], "ref_ppl": t["ref_perplexity"], "kl": t["mean_kl"], "top1": 100.0 * t["top1"]}

# The token ids: base.kld ("_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 ids[n_ctx·n_chunk]) and
# tandem's logprob file (magic, u32 version, vocab, rows, row tokens, 40 zero bytes, i32 ids[rows·N]).
with open(f"{work}/base.kld", "rb") as f:
    magic, n_ctx, n_vocab, n_chunk = struct.unpack("<8sIii", f.read(20))
    ll_ids = struct.unpack(f"<{n_ctx * n_chunk}i", f.read(4 * n_ctx * n_chunk))
with open(f"{work}/pack.tlp", "rb") as f:
    _, _, vocab, rows, row_tokens = struct.unpack("<8sIIII", f.read(24))
    f.seek(64)
    tm_ids = struct.unpack(f"<{rows * row_tokens}i", f.read(4 * rows * row_tokens))
ll_positions = n_chunk * (n_ctx - 1 - n_ctx // 2)
if magic != b"_logits_":
    fails.append("base.kld is not llama-perplexity's log-probability file")
if (n_ctx, n_chunk, n_vocab) != (row_tokens, rows, vocab):
    fails.append(f"shapes: llama.cpp {n_chunk} chunks × {n_ctx}, vocab {n_vocab}; tandem {rows} rows × {row_tokens}, vocab {vocab}")
if ll_positions != t["positions"]:
    fails.append(f"positions scored: llama.cpp {ll_positions}, tandem {t['positions']}")
diff = [i for i, (a, b) in enumerate(zip(ll_ids, tm_ids)) if a != b]
if len(ll_ids) != len(tm_ids) or diff:
    at = diff[0] if diff else min(len(ll_ids), len(tm_ids))
    fails.append(f"token ids: llama.cpp {len(ll_ids)}, tandem {len(tm_ids)}, {len(diff)} differ, the first at {at}")

print(f"pack {pack_type} against base (synthetic tiny, gguf-iq2); tandem on {device}")
print(f"{n_chunk} chunks × {n_ctx} tokens, second half scored: {ll_positions} positions (llama.cpp), "
      f"{t['positions']} (tandem); token ids {'identical' if not diff and len(ll_ids) == len(tm_ids) else 'DIFFER'} "
      f"({len(tm_ids)} tandem, {len(ll_ids)} llama.cpp)\n")
print(f"{'':22} {'tandem':>14} {'llama.cpp':>14} {'rel. diff':>10}")
for key, name in [("ppl", "perplexity (pack)"), ("ref_ppl", "perplexity (base)"), ("kl", "mean KL (base||pack)"),
                  ("top1", "top-1 agreement %")]:
    a, b = tm[key], ll[key]
    rel = abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))
    flag = "" if rel <= tol else "  > tolerance"
    if rel > tol:
        fails.append(f"{name}: tandem {a:.6g}, llama.cpp {b:.6g}, relative difference {rel:.3%} > {100 * tol:g}%")
    print(f"{name:22} {a:14.6f} {b:14.6f} {100 * rel:9.3f}%{flag}")
print()
if fails:
    print("FAIL: " + "; ".join(fails))
    sys.exit(1)
print(f"PASS: every relative difference within {100 * tol:g}%, token ids identical")
EOF
[[ ${KEEP:-0} == 1 || -n ${WORK:-} ]] || rm -rf "$work"
exit "$rc"
