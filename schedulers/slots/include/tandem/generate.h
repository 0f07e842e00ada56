// Generation over a Model: the prompt in prefill chunks, then one verify step per token (plain
// decode is verification with no draft) or, with drafters, one verify pass per chain. One loop
// (tandem::Generation, generation.h) runs it for generate(), Drafting::generate(), `tandem serve`'s
// slots and `tandem bench`.
// Owner: borrows the Model. Thread: the calling thread. Sync: each step waits for its logits.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/model.h"

namespace tandem {

// Tokens per prefill pass of `tandem serve`, `tandem generate` and `tandem bench`: enough rows that the expert GEMMs
// fill the GPU (Bolt gguf-iq2 on an H200, 8,192-token prompt: 2,955 tok/s at 512, 4,267 at 2048,
// 4,526 at 4096; 2026-12-02), few enough that other slots and cancels get a turn and that a long
// prompt stays within its weights + 6 GiB (issue #18: 131,072 tokens). The layers share their
// activation scratch, which grows with the pass; for Bolt (spec § 13.3, f32, the widest layer of each
// kind) one token takes
//   model x, h, out 3·4096 = 12,288 floats; attention q, k, v, out 4096 + 2·256 + 4096 = 8,704;
//   MoE logits 496 + ids, weights 2·9 + latent 1024 + h 9·2560 + eo 9·1024 + Σ 1024 + shared 4096
//   + mid 5376 = 44,290; Mamba2 arena proj 18,560 + xBC 10,240 + Δ 128 + y, z, normed 3·8192
//   + scan 8·128 + 128 = 54,656
// = 119,938 floats ≈ 0.48 MB: 0.25 GB at 512 tokens, 0.98 GB at 2048. The context holds KV
// 8·2·32768·256·4 B = 0.54 GB and Mamba state 40·2·(10240·3 + 128·64·128)·4 B = 0.35 GB (+ 0.05 GB of
// verify logs); the CUDA pool adds its 2 MiB rounding of every weight and keeps the blocks of
// earlier, smaller passes. Measured peaks (H200, Bolt gguf-iq2, 32,768-token context): weights
// + 2.56 GB at 512 (2026-11-30), + 3.08 GB at 2048, + 4.03 GB at 4096 (2026-12-02). The prefix cache's
// checkpoints sit on this grid, so a growing conversation re-reads up to one chunk per turn.
constexpr int kDefaultPrefillChunk = 2048;

struct GenerateOptions {
  int max_tokens = 256;
  int64_t context = 4096;
  SamplingParams sampling;
  bool stop_at_eos = true;
  // Tokens per prefill pass; 0 = the whole prompt in one pass, whose scratch grows with the prompt
  // (~0.48 MB a token at Bolt: 65 GB for 131,072 tokens).
  int prefill_chunk = kDefaultPrefillChunk;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (the prompt not included)
  double prefill_seconds = 0;   // until the first token was chosen
  double decode_seconds = 0;    // from the first to the last generated token
  bool stopped_at_eos = false;
};

// What a caller adds at each position a request decodes, plain or drafted, so that both pick tokens
// by the same rules (tandem serve: logit bias, penalties, min_tokens, grammar masks, forced tokens).
// The hooks see the positions in order, each after the previous token was emitted, so whatever
// they keep per token (penalty counts, a grammar matcher) is current for every verified row: a
// draft is accepted only if it is the token the caller's plain rule picks from that row.
struct StepHooks {
  // Optional: sees each decoded position's logits as the model made them, before `forced`, `process`
  // and the draw (logprobs). Drafted: each verified row, in order, as plain decoding would see it.
  std::function<void(const float* row)> observe;
  // Optional: with it, prefill passes keep every position's logits and hand over row i (what follows
  // prompt token i) for i < prompt size − 1, in order; the last prompt row goes to `observe`.
  std::function<void(size_t i, const float* row)> prompt_row;
  // Optional: a token forced at this position (a reasoning budget's close); the row is not read.
  std::function<bool(int32_t& token)> forced;
  // Optional: edits this position's logits in place before a token is drawn from them.
  std::function<void(float* row)> process;
  // Required: each committed token, in order; false ends the request at this token.
  std::function<bool(int32_t token)> emit;
};

// The prompt into `seq`, committed, in passes of `chunk` tokens (0: one pass), as generate() reads it;
// `logits` ends with the last prompt position's row.
TANDEM_API void prefill(Model& model, Sequence& seq, const std::vector<int32_t>& prompt, int chunk,
                        std::vector<float>& logits);

// on_token (optional) sees every generated token as it is chosen; returning false stops early.
TANDEM_API GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   const std::function<bool(int32_t)>& on_token = {});

}  // namespace tandem
