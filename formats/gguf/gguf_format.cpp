// GgufFormat and GgufTensor: glue from the WeightFormat interface to the reader and the per-type
// block kernels of quant.h.
#include "gguf_format.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gguf_checkpoint.h"
#include "gguf_file.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::gguf {
namespace {

constexpr int64_t kRowTile = 16;  // activation rows kept hot while weight rows stream past

// The tensor a group multiplies with: prefix.weight, else the tensor named by the prefix.
const RawTensor* main_member(const TensorGroup& group) {
  const RawTensor* t = group.member("weight");
  return t ? t : group.member("");
}

float scale_value(const RawTensor* s) {
  if (!s) return 1.0f;
  int64_t n = 1;
  for (int64_t d : s->shape) n *= d;
  check(s->dtype == "F32" && n == 1 && s->nbytes == 4, "gguf: tensor '", s->name, "': expected one F32 scale, found ",
        s->dtype, " ", shape_str(s->shape));
  float v;
  std::memcpy(&v, s->data, 4);
  return v;
}

// Calls out(i, r) for every activation row i < n and weight row r < m (rows of k elements): parallel
// over weight rows, with tiles of activation rows kept hot while the weight rows stream past.
template <typename Out>
void for_each_output(int64_t n, int64_t m, int64_t k, const Out& out) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, k * std::min(n, kRowTile)));
  parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < n; t0 += kRowTile) {
      const int64_t t1 = std::min(n, t0 + kRowTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t i = t0; i < t1; ++i) out(i, r);
    }
  });
}

}  // namespace

bool llama_activations_requested() {
  const char* v = std::getenv("TANDEM_GGUF_ACTIVATIONS");
  const std::string mode = v ? v : "";
  if (mode.empty() || mode == "f32") return false;
  check(mode == "llama", "gguf: environment variable TANDEM_GGUF_ACTIVATIONS is '", mode,
        "', expected 'f32' (the default) or 'llama'");
  return true;
}

int GgufFormat::probe_path(const std::string& path) const { return probe_checkpoint(path); }

std::unique_ptr<Checkpoint> GgufFormat::open(const std::string& path) const { return open_checkpoint(path); }

int GgufFormat::probe_group(const TensorGroup& group) const {
  const RawTensor* t = main_member(group);
  if (!t || !find_type(t->dtype)) return 0;
  return GgufFile::owns(t->data) ? 20 : 5;
}

std::unique_ptr<QuantizedTensor> GgufFormat::load(const TensorGroup& group, Backend& backend) const {
  const std::string device = backend.device();
  check(device == "cpu", "gguf: no kernels for device '", device, "' (loading ", group.describe(), ")");
  const RawTensor* t = main_member(group);
  check(t != nullptr, "gguf: group ", group.describe(), " has no 'weight' or exact-name tensor");
  const QuantType* type = find_type(t->dtype);
  check(type != nullptr, "gguf: tensor '", t->name, "' has ggml type ", t->dtype,
        ", which tandem cannot compute (no CPU kernel for it)");
  return std::make_unique<GgufTensor>(*t, *type, t == group.member("weight") ? group.member("scale") : nullptr,
                                      llama_activations_requested());
}

GgufTensor::GgufTensor(const RawTensor& raw, const QuantType& type, const RawTensor* scale, bool llama_activations)
    : name_(raw.name), type_(type), data_(raw.data), nbytes_(raw.nbytes), llama_activations_(llama_activations) {
  shape_ = raw.shape;
  int64_t numel = 1;
  for (int64_t d : shape_) numel *= d;
  row_len_ = shape_.empty() ? 1 : shape_.back();
  check(row_len_ > 0 && row_len_ % type.block_elems == 0, "gguf: tensor '", name_, "': rows of ", row_len_,
        " elements are not a whole number of ", type.name, " blocks (", type.block_elems, ")");
  n_rows_ = numel / row_len_;
  row_bytes_ = row_bytes(type, row_len_);
  check(uint64_t(n_rows_) * uint64_t(row_bytes_) == nbytes_, "gguf: tensor '", name_, "': shape ", shape_str(shape_),
        " of ", type.name, " needs ", n_rows_ * row_bytes_, " bytes, found ", nbytes_);
  scale_ = scale_value(scale);
}

void GgufTensor::matmul_raw(const Tensor& x, const Tensor& y) const {
  if (llama_activations_ && type_.act != ActFormat::F32) return matmul_llama(x, y);
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t m = rows(), k = row_len_;
  for_each_output(x.rows, m, k, [&](int64_t i, int64_t r) {
    ys[i * m + r] = type_.dot(data_ + r * row_bytes_, xs + i * k, k) * scale_;
  });
}

void GgufTensor::matmul_llama(const Tensor& x, const Tensor& y) const {
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t n = x.rows, m = rows(), k = row_len_;
  const int64_t xb = act_row_bytes(type_.act, k);
  // Scratch of the calling thread, kept for the next matmul (a Model runs on one thread at a time).
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(size_t(n * xb));
  uint8_t* xa = scratch.data();
  parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) quantize_activations(type_.act, xs + i * k, xa + i * xb, k);
  });
  for_each_output(n, m, k, [&](int64_t i, int64_t r) {
    ys[i * m + r] = type_.dot_act(data_ + r * row_bytes_, xa + i * xb, k) * scale_;
  });
}

void GgufTensor::get_rows(const int32_t* ids, int n, const Tensor& out) const {
  check(shape_.size() == 2, "get_rows: tensor '", name_, "' has shape ", shape_str(shape_), ", expected 2-D");
  check(out.dtype == DType::F32 && out.rows == n && out.cols == row_len_, "get_rows: tensor '", name_,
        "': output is ", dtype_name(out.dtype), " [", out.rows, ", ", out.cols, "], expected f32 [", n, ", ",
        row_len_, "]");
  for (int i = 0; i < n; ++i)
    check(ids[i] >= 0 && ids[i] < n_rows_, "get_rows: tensor '", name_, "': id ", ids[i], " at position ", i,
          " is outside [0, ", n_rows_, ")");
  for (int i = 0; i < n; ++i) {
    float* dst = out.row(i);
    type_.dequantize(data_ + int64_t(ids[i]) * row_bytes_, dst, row_len_);
    if (scale_ != 1.0f)
      for (int64_t c = 0; c < row_len_; ++c) dst[c] *= scale_;
  }
}

void GgufTensor::dequantize(float* out_host) const {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / row_len_);
  parallel_for(n_rows_, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = out_host + r * row_len_;
      type_.dequantize(data_ + r * row_bytes_, dst, row_len_);
      if (scale_ != 1.0f)
        for (int64_t c = 0; c < row_len_; ++c) dst[c] *= scale_;
    }
  });
}

}  // namespace tandem::gguf
