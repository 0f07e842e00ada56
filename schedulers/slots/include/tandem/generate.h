// Plain generation over a Model: prefill, then one verify step per token (plain decode is
// verification with no draft). Drafting schedulers build on the same forward/commit calls.
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
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (the prompt not included)
  double prefill_seconds = 0;
  double decode_seconds = 0;    // from the first to the last generated token
  bool stopped_at_eos = false;
};

// on_token (optional) sees every generated token as it is chosen; returning false stops early.
TANDEM_API GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   const std::function<bool(int32_t)>& on_token = {});

}  // namespace tandem
