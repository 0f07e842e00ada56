// The Mamba2 mixer on a CUDA device (spec/nemotron_h.md § 3): the CPU mixer's passes and commit rule
// (mixer_cpu.h) with the state, the verify log and the scratch in device memory.
// Owner: the Model owns the Mixer (weights only); a Sequence owns its Mamba2CudaState; mixers of one
// factory share one scratch arena (only one layer runs at a time). Thread: one thread runs
// forward/commit at a time. Sync: forward/commit queue work on the CUDA stream and return at once;
// only the download_* test helpers wait.
// Bit-exactness: verify rows equal single steps and commit(n) equals n steps, bit for bit. Prefill
// passes split on the chunk grid equal one pass when every part has more than 16 rows (the dense
// matmul takes its batch-invariant GEMV at 16 rows and below, a tiled kernel above).
#pragma once
#include <memory>
#include <vector>

#include "mixer_checks.h"
#include "mixer_weights.h"
#include "scan_cpu.h"
#include "tandem/layer.h"

namespace tandem::mamba2 {

struct CudaArena;

// Committed conv window [conv_dim, K−1] and SSM state [nh, P, N] (f32, device), plus the pending
// pass: for Verify the logs u, x|B|C and Δ of its n positions and the state after all n steps; for
// Prefill the final state and the new window.
// Window and state are double-buffered at addresses fixed for the state's life. The host swaps its
// committed/spare pointers on commit and the commit's kernel stores the same choice in `sel_` (device
// ints: window, state), which the verify kernels read: a verify pass recorded in a graph stays right
// after any number of commits.
class Mamba2CudaState : public LayerState {
 public:
  Mamba2CudaState(const Dims& dm, Backend& backend);
  size_t bytes() const override;

  const Dims& dims() const { return dm_; }
  int64_t pos() const { return pos_; }
  bool pending() const { return pass_.open; }
  // Copies of the committed state in host memory, for tests (these wait for the device).
  std::vector<float> download_conv() const;
  std::vector<float> download_ssm() const;
  // Tests: fills the verify logs with NaN (0xff bytes), so a pass that leaves any entry unwritten shows.
  void poison_logs();

 private:
  friend class Mamba2CudaMixer;
  Dims dm_;
  Backend& backend_;
  int64_t pos_ = 0;
  std::unique_ptr<Buffer> conv_, ssm_, next_conv_, next_ssm_;
  float* conv_pair_[2] = {};  // the two window buffers, in a fixed order
  float* ssm_pair_[2] = {};
  std::unique_ptr<Buffer> sel_;  // int[2] on the device: which of conv_pair_ / ssm_pair_ is committed
  // Host copies of the selectors: which of the pair conv_ / ssm_ point to now.
  int conv_sel() const;
  int ssm_sel() const;
  PendingPass pass_;
  std::unique_ptr<Buffer> u_log_, xbc_log_, dt_log_;  // verify passes only, grown to the pass
};

// Small per-layer vectors in device memory (f32).
struct Mamba2CudaWeights {
  std::unique_ptr<QuantizedTensor> in_proj, out_proj;
  std::unique_ptr<Buffer> in_bias, out_bias;  // null without desc.proj_bias
  std::unique_ptr<Buffer> conv_w, conv_b;     // conv_b null without desc.conv_bias
  std::unique_ptr<Buffer> dt_bias, a, d, norm;
};

class Mamba2CudaMixer : public Mixer {
 public:
  Mamba2CudaMixer(const MambaDesc& desc, int hidden, WeightLoader& weights, Backend& backend,
                  std::shared_ptr<CudaArena> arena);
  ~Mamba2CudaMixer() override;

  std::unique_ptr<LayerState> new_state(int64_t max_tokens) const override;
  void forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) override;
  void commit(LayerState& state, const ForwardInfo& last, int n_accepted) override;
  // A snapshot holds the committed window and SSM state only (device memory); restore() copies them
  // into the committed buffers, so the selectors and recorded graphs of the state stay valid.
  std::unique_ptr<LayerState> snapshot(const LayerState& state, int64_t pos) const override;
  void restore(const LayerState& snapshot, LayerState& state, int64_t pos) const override;

  // Verify passes of several sequences: in_proj and out_proj once on all rows, the fused kernel between
  // them once for all sequences (grid z = sequence; each sequence's blocks as in its own pass), the
  // unfused kernels per sequence (Mixer::forward_batch).
  void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                     const std::vector<ForwardInfo>& infos) override;

  const Dims& dims() const { return dm_; }
  // Tests: fills the shared scratch (y, z, normed) with NaN, so a pass that leaves any entry unwritten
  // shows in its output.
  void poison_scratch();

 private:
  Mamba2CudaState& state_of(LayerState& state, const char* what) const;
  void run(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos, size_t B);

  MambaDesc desc_;
  Dims dm_;
  int hidden_;
  Backend& backend_;
  Mamba2CudaWeights w_;
  std::shared_ptr<CudaArena> arena_;
  // Verify passes run launch_verify_fused (one kernel between the matmuls) unless
  // TANDEM_MAMBA2_UNFUSED_VERIFY=1 at construction picks the separate kernels (the same bits).
  bool fused_verify_ = true;
  std::unique_ptr<Buffer> norm_counters_;  // unsigned[G] for the fused pass's group hand-off
};

class Mamba2CudaFactory : public LayerFactory {
 public:
  Mamba2CudaFactory();
  ~Mamba2CudaFactory() override;
  LayerKind kind() const override { return LayerKind::Mamba; }
  std::unique_ptr<Mixer> create(const LayerDesc& desc, int hidden, WeightLoader& weights, Backend& backend) override;

 private:
  std::shared_ptr<CudaArena> arena_;
};

}  // namespace tandem::mamba2
