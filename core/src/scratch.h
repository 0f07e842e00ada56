// Scratch memory on a backend that the layers of one Model share and every forward reuses.
// Owner: the Model owns its MixerScratch; mixers and expert sets hold a reference to it. Thread: the
// one thread that drives the Model. Sync: none; slots are reused in stream order (see MixerScratch).
#pragma once
#include <algorithm>
#include <memory>

#include "tandem/backend.h"

namespace tandem {

// One slot: a buffer that only grows, so a steady loop of passes of one size never reallocates and a
// recorded graph keeps its addresses. Growing releases the old buffer, which moves the backend's
// memory epoch: the Model then drops its recorded graphs.
class Scratch {
 public:
  // A user of the slot takes at most `floats_per_token` floats per token of a pass.
  void fit(int64_t floats_per_token) { per_token_ = std::max(per_token_, floats_per_token); }
  // Grows the slot to what its widest user takes for `tokens` tokens.
  void reserve(Backend& be, int64_t tokens) {
    if (per_token_ > 0) grow(be, size_t(tokens * per_token_) * sizeof(float));
  }
  // A [rows, cols] f32 tensor in this slot (contents undefined), grown when needed.
  Tensor f32(Backend& be, int64_t rows, int64_t cols) {
    grow(be, size_t(rows * cols) * sizeof(float));
    return Tensor::f32(static_cast<float*>(buf_->data()), rows, cols);
  }

 private:
  void grow(Backend& be, size_t bytes) {
    if (buf_ && buf_->bytes() >= bytes) return;
    buf_.reset();  // first, so old and new are never held at once (blocks are reused in stream order)
    buf_ = be.alloc(std::max<size_t>(bytes, 64));
  }

  std::unique_ptr<Buffer> buf_;
  int64_t per_token_ = 0;
};

// The scratch of the core mixers: one slot per role, shared by every layer of a Model, so activation
// scratch scales with the tokens of a pass, not with layers × tokens. Layers run one after another
// in stream order, so a slot reused by the next layer is only overwritten by work queued after this
// layer's; roles live at the same time within one layer have slots of their own (also roles on
// different lanes, Backend::fork, whose work may run at the same time). Each mixer declares
// its widest use of a slot when built (Scratch::fit) and Model::forward reserves every slot for the
// pass's tokens before running it: a pass through layers of different widths grows each slot once
// (not once per wider layer, leaving the narrower blocks behind in the backend's cache), and no slot
// grows inside a recorded pass.
struct MixerScratch {
  Scratch attn_q, attn_k, attn_v, attn_out;                   // attention: projections, heads' output
  Scratch moe_logits, moe_ids, moe_weights;                   // MoE router: [n, E], [n, k] (ids as i32)
  Scratch moe_latent, moe_hidden, moe_expert_out, moe_sum;    // MoE experts: u, h [n·k, w], eo, Σ
  Scratch moe_shared;                                         // the shared expert's output [n, H]
  Scratch ffn_mid;                                            // relu²(up·x): dense MLP, shared expert
  Scratch gather_in, gather_out;                              // per-expert sets: one expert's rows

  void reserve(Backend& be, int64_t tokens) {
    for (Scratch* s : {&attn_q, &attn_k, &attn_v, &attn_out, &moe_logits, &moe_ids, &moe_weights, &moe_latent,
                       &moe_hidden, &moe_expert_out, &moe_sum, &moe_shared, &ffn_mid, &gather_in, &gather_out})
      s->reserve(be, tokens);
  }
};

}  // namespace tandem
