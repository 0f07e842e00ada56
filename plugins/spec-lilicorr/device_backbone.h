// The DFlash backbone (backbone.h) on the target's backend: the drafter's linears are loaded once by the
// target's own weight formats (Model::load_weight: BF16 where the checkpoint's values are BF16) and the
// layers run as Backend ops (rms_norm, rope, attention_full, silu_mul, add) and matmuls, so one code
// path serves a CPU and a CUDA target. The context cache (committed rows' K/V after k_norm and RoPE)
// lives in device memory; the taps are read where the target keeps them. backbone.cpp stays the fp32
// host reference that tests compare against.
// Owner: DeviceWeights belong to one (checkpoint, target) pair and are shared read-only by the drafters
// made for it; a DeviceBackbone belongs to one sequence's drafter. Thread: the engine thread. Sync: every
// call only queues work on the backend's stream (no download, no synchronize). Graphs: run_block reads the
// context length from device memory, so the drafter records it once (drafter.cpp).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backbone.h"
#include "tandem/backend.h"
#include "tandem/weights.h"

namespace tandem {
class Model;
}

namespace tandem::lilicorr {

struct DeviceLinear {
  std::unique_ptr<QuantizedTensor> w;
  std::unique_ptr<Buffer> bias;  // [1, out], or null
};

// What loaded device weights were made from (a host weight may point into it).
struct WeightSource {
  std::deque<std::vector<uint8_t>> bytes;
  std::deque<RawTensor> raws;
};

// W [out, in] (host f32, row-major) loaded by the target's formats as a weight named `name`: BF16 when
// every value is a BF16 number (a BF16 checkpoint's, read exactly), else F32; `bias` empty or [out].
DeviceLinear load_linear(WeightSource& src, Model& target, const std::string& name, int64_t out, int64_t in,
                         const float* w, const std::vector<float>& bias);
std::unique_ptr<Buffer> upload_f32(Backend& be, const std::vector<float>& v);
// y = x·Wᵀ (+ b) on the backend (queued).
void apply(Backend& be, const DeviceLinear& L, const Tensor& x, const Tensor& y);

struct DeviceLayer {
  std::unique_ptr<Buffer> input_norm, post_norm, q_norm, k_norm;
  DeviceLinear q, k, v, o, gate, up, down;
};

// Rows of one context append (longer appends run in chunks) and the most block rows: scratch and
// broadcast biases hold this many rows.
constexpr int64_t kRowChunk = 64;

struct DeviceWeights {
  BackboneConfig c;
  std::vector<DeviceLinear> fc;  // per tap: the columns of fc that multiply that tap, [H, H]
  std::unique_ptr<Buffer> hidden_norm, norm;
  std::unique_ptr<Buffer> rope_inv_freq;  // [head_dim/2] (rope_scaling yarn), or null: plain θ
  std::vector<DeviceLayer> layers;
  WeightSource src;
};

// Loads `w` onto the target's backend with the target's formats.
std::shared_ptr<const DeviceWeights> load_device_weights(const BackboneWeights& w, Model& target);

class DeviceBackbone {
 public:
  DeviceBackbone(Backend& backend, std::shared_ptr<const DeviceWeights> w);
  // Forgets the context (a new sequence).
  void clear() { rows_ = 0, prepared_ = -1; }
  int64_t rows() const { return rows_; }
  // Appends positions rows() … rows() + n − 1 from the tapped states (taps[t]: [≥ r0 + n, H], rows
  // r0 … r0 + n − 1 are used).
  void append(const std::vector<Tensor>& taps, int64_t r0, int64_t n);
  // Readies the next run_block (queued, never recorded): room for the block in the caches, and the
  // block's first position rows() uploaded to the device (block_position()).
  void prepare_block();
  // Runs the block x [B, H] (embedded, scaled) at positions rows() … rows() + B − 1 (x is overwritten)
  // and writes norm(x) of rows 1 … B − 1 into out [B − 1, H]; the block's K/V stay out of the context.
  // prepare_block() must have run since the context last changed. Only recordable work, and everything
  // that depends on rows() read from block_position(): a recording of it replays at any context length
  // while cache_generation() stays the same (the caches' addresses).
  void run_block(const Tensor& x, const Tensor& out);
  // hidden_norm(fc(·)) of the last appended position [H] (the anchor row of the head).
  Tensor last_row() const;
  // Changes whenever the caches are reallocated (a recorded run_block holds their addresses).
  uint64_t cache_generation() const { return generation_; }
  // The device copy of the block's first position (int64), written by prepare_block().
  const int64_t* block_position() const { return static_cast<const int64_t*>(pos_->data()); }

 private:
  void reserve(int64_t rows);
  // k = k_norm(k_proj(h)), v = v_proj(h) for h's rows into k, v; then RoPE of k at positions pos0 …
  // (read from pos0_device when not null).
  void project_kv(size_t l, const Tensor& h, const Tensor& k, const Tensor& v, int64_t pos0,
                  const int64_t* pos0_device);
  Tensor buf(const std::unique_ptr<Buffer>& b, int64_t rows, int64_t cols) const;

  Backend& be_;
  std::shared_ptr<const DeviceWeights> w_;
  int64_t rows_ = 0, capacity_ = 0;
  uint64_t generation_ = 0;
  int64_t prepared_ = -1;  // the rows() that prepare_block() uploaded (-1: none since the last change)
  std::vector<std::unique_ptr<Buffer>> k_, v_;  // per layer [capacity, kv_heads·head_dim]
  // The block's K/V [B, kv_heads·head_dim] before attention_full_at copies them behind the context, and
  // the block's first position (int64).
  std::unique_ptr<Buffer> ctx_, h_, q_, att_, d_, g_, u_, last_, kb_, vb_, pos_;
};

}  // namespace tandem::lilicorr
