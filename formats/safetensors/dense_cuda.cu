// The QuantizedTensor/ExpertSet classes of dense weights on the GPU: they upload a checkpoint's bytes
// and queue the dense kernels of the kernels library (tandem/cuda/dense.cuh).
#include "dense_cuda.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "tandem/cuda/dense.cuh"
#include "tandem/error.h"

namespace tandem::safetensors {

using cuda::check_cuda;
using cuda::elem_bytes;
using cuda::launch_dense_gather_matmul;
using cuda::launch_dense_get_rows;
using cuda::launch_dense_matmul;
using cuda::WType;

namespace {

WType wtype_of(const RawTensor& raw) {
  if (raw.dtype == "BF16") return WType::BF16;
  if (raw.dtype == "F16") return WType::F16;
  if (raw.dtype == "F32") return WType::F32;
  fail("safetensors (cuda): tensor '", raw.name, "': dtype ", raw.dtype, " is not dense, expected BF16, F16 or F32");
}

const char* wtype_name(WType t) { return t == WType::BF16 ? "BF16" : t == WType::F16 ? "F16" : "F32"; }

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void check_bytes(const RawTensor& raw, WType t) {
  const size_t want = size_t(numel_of(raw.shape)) * elem_bytes(t);
  check(raw.nbytes == want, "safetensors (cuda): tensor '", raw.name, "': shape ", shape_str(raw.shape), " of ",
        raw.dtype, " needs ", want, " bytes, found ", raw.nbytes);
}

// Device bytes → f32 host values.
void to_f32(WType t, const std::vector<uint8_t>& bytes, int64_t n, float* out) {
  const auto* h = reinterpret_cast<const uint16_t*>(bytes.data());
  switch (t) {
    case WType::BF16: for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]); break;
    case WType::F16: for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]); break;
    case WType::F32: std::memcpy(out, bytes.data(), size_t(n) * sizeof(float)); break;
  }
}

void check_f32_rows(const char* op, const std::string& name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": tensor '", name, "': ", dtype_name(t.dtype), " [", t.rows, ", ", t.cols, "], expected f32 [", rows,
         ", ", cols, "]");
}

class DenseCudaTensor final : public QuantizedTensor {
 public:
  DenseCudaTensor(const RawTensor& raw, Backend& be) : name_(raw.name), type_(wtype_of(raw)) {
    check_bytes(raw, type_);
    shape_ = raw.shape;
    numel_ = numel_of(shape_);
    buf_ = be.alloc(std::max<size_t>(raw.nbytes, 16));
    be.upload(buf_->data(), raw.data, raw.nbytes);
  }

  std::string type_name() const override { return wtype_name(type_); }
  size_t bytes() const override { return size_t(numel_) * elem_bytes(type_); }

  void get_rows(const int32_t* ids, int n, const Tensor& out) const override {
    check(shape_.size() == 2, "get_rows: tensor '", name_, "' has shape ", shape_str(shape_), ", expected 2-D");
    check_f32_rows("get_rows", name_, out, n, cols());
    for (int i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= rows())
        fail("get_rows: tensor '", name_, "': id ", ids[i], " at position ", i, " is outside [0, ", rows(), ")");
    launch_dense_get_rows(type_, buf_->data(), cols(), ids, n, out.f32(), cuda::stream());
  }

  void dequantize(float* out_host) const override {
    std::vector<uint8_t> bytes(this->bytes());
    check_cuda(cudaMemcpyAsync(bytes.data(), buf_->data(), bytes.size(), cudaMemcpyDeviceToHost, cuda::stream()),
               "dequantize: download");
    check_cuda(cudaStreamSynchronize(cuda::stream()), "dequantize: synchronize");
    to_f32(type_, bytes, numel_, out_host);
  }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override {
    launch_dense_matmul(type_, buf_->data(), rows(), cols(), x.f32(), x.rows, y.f32(), cuda::stream());
  }

 private:
  std::string name_;
  WType type_;
  int64_t numel_ = 0;
  std::unique_ptr<Buffer> buf_;
};

class DenseCudaExperts final : public ExpertSet {
 public:
  DenseCudaExperts(const std::vector<const RawTensor*>& experts, Backend& be) {
    check(!experts.empty(), "safetensors (cuda): an expert set needs at least one expert");
    const RawTensor& first = *experts[0];
    type_ = wtype_of(first);
    check(first.shape.size() == 2, "safetensors (cuda): expert '", first.name, "' has shape ", shape_str(first.shape),
          ", expected 2-D");
    n_ = int(experts.size());
    m_ = first.shape[0];
    k_ = first.shape[1];
    for (const RawTensor* e : experts) {
      check(e->dtype == first.dtype && e->shape == first.shape, "safetensors (cuda): expert '", e->name, "' is ",
            e->dtype, " ", shape_str(e->shape), ", expected ", first.dtype, " ", shape_str(first.shape), " like '",
            first.name, "'");
      check_bytes(*e, type_);
    }
    const size_t each = size_t(m_ * k_) * elem_bytes(type_);
    buf_ = be.alloc(std::max<size_t>(each * size_t(n_), 16));
    for (int e = 0; e < n_; ++e) be.upload(static_cast<uint8_t*>(buf_->data()) + each * size_t(e), experts[e]->data, each);
    name_ = first.name;
  }

  int n_experts() const override { return n_; }
  int64_t rows() const override { return m_; }
  int64_t cols() const override { return k_; }
  std::string type_name() const override { return wtype_name(type_); }
  size_t bytes() const override { return size_t(n_) * size_t(m_ * k_) * elem_bytes(type_); }

  void gather_matmul(const Tensor& x, const int32_t* ids, int k, const Tensor& y) const override {
    if (k < 1) fail("gather_matmul: experts '", name_, "' …: k must be positive, found ", k);
    check_f32_rows("gather_matmul", name_, x, x.rows, k_);
    check_f32_rows("gather_matmul", name_, y, x.rows * k, m_);
    if (y.rows == 0) return;
    if (!ids) fail("gather_matmul: experts '", name_, "' …: ids are null");
    launch_dense_gather_matmul(type_, buf_->data(), n_, m_, k_, x.f32(), ids, k, y.rows, y.f32(), cuda::stream());
  }

 private:
  std::string name_;
  WType type_ = WType::F32;
  int n_ = 0;
  int64_t m_ = 0, k_ = 0;
  std::unique_ptr<Buffer> buf_;
};

}  // namespace

std::unique_ptr<QuantizedTensor> load_dense_cuda(const RawTensor& raw, Backend& backend) {
  return std::make_unique<DenseCudaTensor>(raw, backend);
}

std::unique_ptr<ExpertSet> load_dense_experts_cuda(const std::vector<const RawTensor*>& experts, Backend& backend) {
  return std::make_unique<DenseCudaExperts>(experts, backend);
}

}  // namespace tandem::safetensors
