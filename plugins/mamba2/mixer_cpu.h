// The Mamba2 mixer on the CPU (spec/nemotron_h.md § 3): weights, per-sequence state with the
// replay log that verification needs (spec/speculation.md § 4.3), and the layer factory.
// Owner: the Model owns the Mixer (weights only); a Sequence owns its Mamba2State.
// Thread: one thread runs forward/commit of a mixer at a time. Sync: none (host memory).
#pragma once
#include <memory>
#include <vector>

#include "mixer_checks.h"
#include "mixer_weights.h"
#include "scan_cpu.h"
#include "tandem/layer.h"

namespace tandem::mamba2 {

// Committed state plus the pass waiting for commit.
// Committed: conv window [conv_dim, K−1] (last K−1 pre-conv inputs, oldest first) and SSM state
// [nh, P, N], both f32. A forward leaves them untouched and fills the pending pass:
// - Verify: the pre-conv inputs u [n, conv_dim], the post-conv x|B|C [n, conv_dim] and Δ [n, nh],
//   plus the state after all n steps (commit(n) takes it; commit(a < n) replays a steps).
// - Prefill: the final SSM state of the chunked scan and the new conv window (no log is kept, so a
//   long prompt costs no per-token memory here).
// A forward without a commit is simply replaced by the next forward (the pending pass is dropped).
class Mamba2State : public LayerState {
 public:
  explicit Mamba2State(const Dims& dm);
  size_t bytes() const override;

  const Dims& dims() const { return dm_; }
  int64_t pos() const { return pos_; }  // tokens committed
  const std::vector<float>& conv() const { return conv_; }
  const std::vector<float>& ssm() const { return ssm_; }
  bool pending() const { return pass_.open; }

 private:
  friend class Mamba2Mixer;
  Dims dm_;
  int64_t pos_ = 0;
  std::vector<float> conv_, ssm_;
  // The pending pass.
  PendingPass pass_;
  std::vector<float> next_conv_, next_ssm_;
  std::vector<float> u_log_, xbc_log_, dt_log_;
};

class Mamba2Mixer : public Mixer {
 public:
  Mamba2Mixer(const MambaDesc& desc, int hidden, WeightLoader& weights, Backend& backend);

  std::unique_ptr<LayerState> new_state(int64_t max_tokens) const override;
  void forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) override;
  void commit(LayerState& state, const ForwardInfo& last, int n_accepted) override;
  // A snapshot is a Mamba2State holding the committed window and SSM state only (no pending pass).
  std::unique_ptr<LayerState> snapshot(const LayerState& state, int64_t pos) const override;
  void restore(const LayerState& snapshot, LayerState& state, int64_t pos) const override;

  // Verify passes of several sequences: the projections and the gated norm once on all rows, the
  // conv and the scan per sequence (Mixer::forward_batch).
  void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                     const std::vector<ForwardInfo>& infos) override;

  const Dims& dims() const { return dm_; }
  const Mamba2Weights& weights() const { return w_; }

 private:
  Mamba2State& state_of(LayerState& state, const char* what) const;
  void run(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos, size_t B);

  MambaDesc desc_;
  Dims dm_;
  int hidden_;
  Backend& backend_;
  Mamba2Weights w_;
};

class Mamba2Factory : public LayerFactory {
 public:
  LayerKind kind() const override { return LayerKind::Mamba; }
  std::unique_ptr<Mixer> create(const LayerDesc& desc, int hidden, WeightLoader& weights,
                                Backend& backend) override;
};

}  // namespace tandem::mamba2
