// Mixers (one per layer kind) and the layer plugins that make them.
// Owner: the Model owns its Mixers; a Sequence owns one LayerState per layer. A Mixer keeps only
// weights and scratch, all per-sequence data lives in its LayerState.
// Thread: one thread runs a forward at a time. Sync: forward/commit queue work on the backend's
// stream and do not synchronize.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/backend.h"
#include "tandem/model_config.h"
#include "tandem/weights.h"

namespace tandem {

// Prefill may use faster kernels (chunked scan) than verify; verify of n tokens must compute, for
// every position, bit for bit what n single-token verify steps compute.
enum class ForwardMode { Prefill, Verify };

struct ForwardInfo {
  int64_t pos0 = 0;  // position of the first token (tokens already committed to the state)
  int n = 0;         // tokens in this pass
  ForwardMode mode = ForwardMode::Verify;
};

class LayerState {
 public:
  virtual ~LayerState() = default;
  // Bytes this state holds on its device.
  virtual size_t bytes() const = 0;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // A fresh (empty) per-sequence state able to hold `max_tokens` positions.
  virtual std::unique_ptr<LayerState> new_state(int64_t max_tokens) const = 0;
  // x: normed layer input [n, H]; out: mixer output [n, H] (the Block adds the residual).
  // Reads the committed state and leaves it unchanged until commit().
  virtual void forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) = 0;
  // Accept the first n_accepted tokens of the last forward: the state afterwards is exactly what
  // n_accepted single-token steps would have left. After a Prefill, n_accepted must be info.n.
  virtual void commit(LayerState& state, const ForwardInfo& last, int n_accepted) = 0;

  // Optional (prefix checkpoints, Model::snapshot/restore). snapshot(): a copy of what `state` (made
  // by this mixer, no pass pending) holds after its first `pos` committed tokens, in new memory of the
  // mixer's backend from alloc_detached() (so that freeing it keeps recorded graphs: only copies
  // outside any recording touch it), no larger than those tokens need (attention: K/V rows
  // 0 … pos−1); device backends must not call it during a capture. restore():
  // writes such a copy back into a state of this mixer (no pass pending, able to hold `pos` tokens);
  // the state is then, bit for bit, what the copied one was; the copy stays valid. Both queue
  // Backend::copy work in stream order and do not synchronize. Default: not supported.
  virtual std::unique_ptr<LayerState> snapshot(const LayerState& state, int64_t pos) const {
    (void)state;
    fail("this layer's mixer cannot copy its state (prefix checkpoints), asked at position ", pos);
  }
  virtual void restore(const LayerState& snapshot, LayerState& state, int64_t pos) const {
    (void)snapshot, (void)state;
    fail("this layer's mixer cannot restore a copy of its state (prefix checkpoints), asked at position ", pos);
  }

  // Optional: verify passes of several sequences in one call (Model::forward_batch). x and out hold
  // the sequences' rows concatenated in order: sequence b owns infos[b].n rows starting at the sum of
  // the earlier infos' n, at positions infos[b].pos0 … of states[b]. Each sequence's rows must come
  // out bit for bit as forward() of those rows alone would make them, and each state is left pending
  // as that forward() leaves it (commit() takes infos[b]). A mixer overrides this to run what does
  // not depend on a sequence (projections, experts) once on all rows, which reads its weights once.
  // Default: forward() on each sequence's row slice, one after another.
  virtual void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                             const std::vector<ForwardInfo>& infos);
};

// Rows of sequence b in a forward_batch start at batch_row_offsets(infos, rows)[b]; the last entry is
// the total (size infos.size() + 1). Errors: a pass of no rows, rows that do not add up to `rows`
// (the batch's x).
inline std::vector<int64_t> batch_row_offsets(const std::vector<ForwardInfo>& infos, int64_t rows) {
  std::vector<int64_t> off(1, 0);
  for (const ForwardInfo& i : infos) {
    check(i.n > 0, "forward_batch: a sequence's pass has ", i.n, " rows, expected at least 1");
    off.push_back(off.back() + i.n);
  }
  check(off.back() == rows, "forward_batch: the sequences' passes have ", off.back(), " rows, x has ", rows);
  return off;
}

inline void Mixer::forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                                 const std::vector<ForwardInfo>& infos) {
  check(states.size() == infos.size(), "forward_batch: ", states.size(), " states for ", infos.size(), " passes");
  const std::vector<int64_t> off = batch_row_offsets(infos, x.rows);
  for (size_t b = 0; b < infos.size(); ++b)
    forward(x.slice_rows(off[b], infos[b].n), out.slice_rows(off[b], infos[b].n), *states[b], infos[b]);
}

// Loads the weights of one layer by names relative to the layer's mixer prefix
// ("in_proj" → "backbone.layers.3.mixer.in_proj"). Shape mismatches and missing tensors are errors
// that name the tensor.
class WeightLoader {
 public:
  virtual ~WeightLoader() = default;
  virtual bool has(const std::string& name) const = 0;
  // A weight with the given PyTorch shape ([out, in] for a linear).
  virtual std::unique_ptr<QuantizedTensor> tensor(const std::string& name,
                                                  const std::vector<int64_t>& shape) = 0;
  // The routed experts names[e] (e = 0..E−1), each of the given shape, as one set.
  // (Default: not supported, for loaders that serve only non-MoE layers, e.g. in tests.)
  virtual std::unique_ptr<ExpertSet> experts(const std::vector<std::string>& names,
                                             const std::vector<int64_t>& shape) {
    (void)shape;
    fail("this weight loader cannot load experts (asked for ", names.size(), " experts)");
  }
  // A small tensor as f32 host memory. The stored shape must equal `shape` once dimensions of size 1
  // are dropped from both (HF conv1d [C, 1, K] and GGUF {K, C} both read as {C, K}).
  virtual std::vector<float> vector(const std::string& name, const std::vector<int64_t>& shape) = 0;
  // The full name of a relative name, for messages.
  virtual std::string full_name(const std::string& name) const = 0;
};

// What a layer plugin provides (kind TANDEM_KIND_LAYER): mixers of one layer kind on one device.
class LayerFactory {
 public:
  virtual ~LayerFactory() = default;
  virtual LayerKind kind() const = 0;
  virtual std::unique_ptr<Mixer> create(const LayerDesc& desc, int hidden, WeightLoader& weights,
                                        Backend& backend) = 0;
};

}  // namespace tandem
