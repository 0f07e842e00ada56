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

struct GenerateOptions {
  int max_tokens = 256;
  int64_t context = 4096;
  SamplingParams sampling;
  bool stop_at_eos = true;
  int prefill_chunk = 0;  // tokens per prefill pass; 0 = the whole prompt in one pass
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

// on_token (optional) sees every generated token as it is chosen; returning false stops early.
TANDEM_API GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   const std::function<bool(int32_t)>& on_token = {});

}  // namespace tandem
