// Checkpoints and weight formats. A format plugin may read a container (open a path into a
// Checkpoint of raw named tensors) and/or claim tensor groups (the tensors of one weight, e.g.
// "backbone.layers.0.mixer.in_proj" with its ".weight", or ".trellis"/".suh"/".svh") and load them
// into a QuantizedTensor that can multiply on a device.
// Owner: a Checkpoint owns its mappings; RawTensors and QuantizedTensors that point into them must not
// outlive it (the Model keeps its Checkpoint alive). Thread: loading happens on one thread; a loaded
// QuantizedTensor's const methods may be called from any thread. Sync: matmul is queued on the
// backend's stream and does not synchronize.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem {

class Backend;

// A tensor as stored in a file. `dtype` is the file's own type name ("BF16", "F32", "Q8_0", …):
// the core does not interpret it, the format that claims the tensor does.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;  // PyTorch order (outermost first); GGUF readers reverse ggml ne
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;            // where it came from, for error messages
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;
  // Path the checkpoint was opened from.
  virtual std::string path() const = 0;
  // The architecture as an HF config.json text. A GGUF reader synthesizes one from its metadata.
  virtual std::string config_json() const = 0;
  virtual const std::vector<RawTensor>& tensors() const = 0;
  // nullptr when absent. Default: linear search; readers index it.
  virtual const RawTensor* find(const std::string& name) const;
  // Side files by their HF names ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
  // the text, or nullopt when the checkpoint has none. A GGUF reader synthesizes them from metadata.
  virtual std::optional<std::string> side_file(const std::string& name) const {
    (void)name;
    return std::nullopt;
  }
  // Human-readable listing for `tandem inspect`: metadata (if any) and the tensor table.
  // Default: one line per tensor with dtype, shape and bytes.
  virtual std::string dump() const;
};

// The tensors of one weight: the tensor named exactly `prefix` and those named `prefix + "." + …`.
struct TensorGroup {
  std::string prefix;
  std::vector<const RawTensor*> members;
  // The shape the model expects (PyTorch order, [out, in] for a linear), or empty when the caller does
  // not know. A format whose storage pads dimensions (EXL3 pads both sides to multiples of 128) uses
  // it to trim; the loader still checks the loaded shape.
  const RawTensor* member(const std::string& suffix) const;  // "weight" → prefix.weight; "" → exact
  std::string describe() const;  // "prefix {weight: BF16 [64, 32], …}"
  std::vector<int64_t> shape;
};

// What a fused matmul does with each result v = (x · Wᵀ)[r, o] before it is stored: store it (None),
// store relu(v)² (Relu2, the MLP and expert activation), or add it to what y holds (Accumulate, a
// residual or a second branch). The same values as the matmul followed by Backend::relu2 or add.
enum class Epilogue { None, Relu2, Accumulate };

// A weight loaded for one device. Shapes are PyTorch order: [out, in] for a linear, [n] for a vector.
class QuantizedTensor {
 public:
  virtual ~QuantizedTensor() = default;
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  int64_t cols() const { return shape_.size() < 2 ? 1 : shape_.back(); }
  virtual std::string type_name() const = 0;  // "BF16", "Q4_K", …
  virtual size_t bytes() const = 0;           // bytes read by one full pass over the weight

  // y[n, out] = x[n, in] · Wᵀ. x, y f32 on the tensor's device. Validates shapes, then runs
  // matmul_raw. Row i of y depends only on row i of x (batch invariance).
  TANDEM_API void matmul(const Tensor& x, const Tensor& y) const;
  // matmul with `ep` applied in the same kernel, when this weight's format fuses it: returns true when
  // done, false (having queued nothing) when the caller must run matmul and the backend op itself.
  // Validates like matmul. A weight gives the same bits fused or not.
  TANDEM_API bool matmul_fused(const Tensor& x, const Tensor& y, Epilogue ep) const;
  // Rows `ids` of a 2-D weight as f32 [n, cols] (embedding lookup).
  virtual void get_rows(const int32_t* ids, int n, const Tensor& out) const;
  // The whole tensor as f32, host memory, row-major (tests, norms and other small vectors).
  virtual void dequantize(float* out_host) const = 0;

 protected:
  virtual void matmul_raw(const Tensor& x, const Tensor& y) const = 0;
  // Default: not fused (false). Called with validated shapes, x.rows > 0 and ep != None.
  virtual bool matmul_fused_raw(const Tensor& x, const Tensor& y, Epilogue ep) const {
    (void)x, (void)y, (void)ep;
    return false;
  }
  std::vector<int64_t> shape_;
};

// The routed experts of one MoE layer: n_experts() weights of one shape [out, in].
// gather_matmul: y has x.rows·k rows; row r of y = W[ids[r]] · x[r / k]. With k = number of experts
// per token this is the up projection of every (token, slot); with k = 1 and x holding one row per
// (token, slot) it is the down projection. ids live in the backend's memory. Each row of y depends
// only on its x row and expert (batch invariance).
class ExpertSet {
 public:
  virtual ~ExpertSet() = default;
  virtual int n_experts() const = 0;
  virtual int64_t rows() const = 0;  // out
  virtual int64_t cols() const = 0;  // in
  virtual std::string type_name() const = 0;
  virtual size_t bytes() const = 0;  // all experts
  virtual void gather_matmul(const Tensor& x, const int32_t* ids, int k, const Tensor& y) const = 0;
  // gather_matmul with `ep` in the same kernel (as QuantizedTensor::matmul_fused): true when done,
  // false (nothing queued) when the caller runs gather_matmul and the backend op. Default: false.
  virtual bool gather_matmul_fused(const Tensor& x, const int32_t* ids, int k, const Tensor& y, Epilogue ep) const {
    (void)x, (void)ids, (void)k, (void)y, (void)ep;
    return false;
  }
};

class WeightFormat {
 public:
  virtual ~WeightFormat() = default;
  // Container side (optional): how well this plugin reads `path` (0 = not at all), and open it.
  virtual int probe_path(const std::string& path) const { (void)path; return 0; }
  virtual std::unique_ptr<Checkpoint> open(const std::string& path) const;
  // Weight side: how well this format loads the group (0 = not at all), and load it.
  virtual int probe_group(const TensorGroup& group) const = 0;
  virtual std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const = 0;
  // Optional: the experts of one layer (groups[e] = expert e) as one set, e.g. a stacked tensor with a
  // fused gather kernel. nullptr (the default) = the core builds a set of per-expert load()s, which
  // works on the CPU only.
  virtual std::unique_ptr<ExpertSet> load_experts(const std::vector<TensorGroup>& groups, Backend& backend) const {
    (void)groups, (void)backend;
    return nullptr;
  }
};

}  // namespace tandem
