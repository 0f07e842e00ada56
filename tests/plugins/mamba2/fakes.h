// Test doubles for the Mamba2 mixer: a backend that only does the gated norm (in double), f32 weights
// with a naive matmul, and an in-memory WeightLoader that checks shapes as the contract says.
#pragma once
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/layer.h"
#include "test_util.h"

namespace tandem::mamba2::test {

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t n) : bytes_(n) {}
  void* data() override { return bytes_.data(); }
  size_t bytes() const override { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
};

class TestBackend : public Backend {
 public:
  std::string device_name = "cpu";
  int norm_calls = 0;

  std::string device() const override { return device_name; }
  bool host = true;  // host memory (HostBuffer); false plays a device backend
  bool is_host() const override { return host; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  // spec § 3.7 in double: u = y·silu(z), RMS per contiguous group, times w.
  void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                      const Tensor& out) override {
    ++norm_calls;
    const int64_t D = y.cols, gs = D / groups;
    std::vector<double> u(static_cast<size_t>(D));
    for (int64_t r = 0; r < y.rows; ++r) {
      for (int64_t c = 0; c < D; ++c) {
        const double zv = z.row(r)[c];
        u[c] = double(y.row(r)[c]) * zv / (1.0 + std::exp(-zv));
      }
      for (int g = 0; g < groups; ++g) {
        double ss = 0;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) ss += u[c] * u[c];
        const double inv = 1.0 / std::sqrt(ss / double(gs) + double(eps));
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) out.row(r)[c] = float(double(w[c]) * u[c] * inv);
      }
    }
  }

  void rms_norm(const Tensor&, const float*, float, const Tensor&) override { fail("test backend: rms_norm"); }
  void add(const Tensor&, const Tensor&, const Tensor&) override { fail("test backend: add"); }
  void relu2(const Tensor&) override { fail("test backend: relu2"); }
  void attention(const Tensor&, const Tensor&, const Tensor&, float*, float*, int64_t, int64_t, int, int, int,
                 const Tensor&) override {
    fail("test backend: attention");
  }
  void moe_route(const Tensor&, const float*, const RouteParams&, int32_t*, float*) override {
    fail("test backend: moe_route");
  }
  int32_t sample(const float*, int64_t, const SamplingParams&, Rng&) override { fail("test backend: sample"); }
};

// An f32 [out, in] weight; each output is a double sum in input order, so rows are independent.
class F32Weight : public QuantizedTensor {
 public:
  F32Weight(std::vector<int64_t> shape, std::vector<float> data) : data_(std::move(data)) {
    shape_ = std::move(shape);
  }
  std::string type_name() const override { return "F32"; }
  size_t bytes() const override { return data_.size() * 4; }
  void dequantize(float* out) const override { std::memcpy(out, data_.data(), data_.size() * 4); }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override {
    const int64_t in = cols(), out = rows();
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t k = 0; k < in; ++k) acc += double(data_[o * in + k]) * x.row(r)[k];
        y.row(r)[o] = float(acc);
      }
  }

 private:
  std::vector<float> data_;
};

struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

class MapLoader : public WeightLoader {
 public:
  std::string prefix = "backbone.layers.0.mixer.";
  std::map<std::string, StoredTensor> tensors;

  bool has(const std::string& name) const override { return tensors.count(name) != 0; }
  std::string full_name(const std::string& name) const override { return prefix + name; }

  std::unique_ptr<QuantizedTensor> tensor(const std::string& name, const std::vector<int64_t>& shape) override {
    const StoredTensor& t = find(name);
    check(t.shape == shape, "weight '", full_name(name), "': expected shape ", shape_str(shape), ", found ",
          shape_str(t.shape));
    return std::make_unique<F32Weight>(t.shape, t.data);
  }
  std::vector<float> vector(const std::string& name, const std::vector<int64_t>& shape) override {
    const StoredTensor& t = find(name);
    check(squeeze(t.shape) == squeeze(shape), "weight '", full_name(name), "': expected shape ",
          shape_str(shape), ", found ", shape_str(t.shape));
    return t.data;
  }
  // Raw values as the test reads them back for the reference.
  const std::vector<float>& at(const std::string& name) const { return tensors.at(name).data; }

 private:
  const StoredTensor& find(const std::string& name) const {
    auto it = tensors.find(name);
    check(it != tensors.end(), "weight '", full_name(name), "' is missing");
    return it->second;
  }
  static std::vector<int64_t> squeeze(const std::vector<int64_t>& s) {
    std::vector<int64_t> r;
    for (int64_t d : s)
      if (d != 1) r.push_back(d);
    return r;
  }
};

// Random weights of one layer, HF-style names and shapes (conv1d stored [conv_dim, 1, K]).
inline MapLoader random_weights(const MambaDesc& d, int hidden, uint64_t seed) {
  using tandem::test::random_vec;
  MapLoader w;
  auto put = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    w.tensors[name] = {shape, random_vec(n, seed++, lo, hi)};
  };
  const float si = 1.0f / std::sqrt(float(hidden)), so = 1.0f / std::sqrt(float(d.d_inner()));
  put("in_proj", {d.in_proj_rows(), hidden}, -si, si);
  put("out_proj", {hidden, d.d_inner()}, -so, so);
  put("conv1d", {d.conv_dim(), 1, d.conv_kernel}, -0.5f, 0.5f);
  if (d.conv_bias) put("conv1d.bias", {d.conv_dim()}, -0.2f, 0.2f);
  if (d.proj_bias) {
    put("in_proj.bias", {d.in_proj_rows()}, -0.2f, 0.2f);
    put("out_proj.bias", {hidden}, -0.2f, 0.2f);
  }
  put("dt_bias", {d.n_heads}, -4.0f, -1.0f);
  put("A_log", {d.n_heads}, 0.0f, 2.0f);
  put("D", {d.n_heads}, 0.5f, 1.5f);
  put("norm", {d.d_inner()}, 0.5f, 1.5f);
  return w;
}

}  // namespace tandem::mamba2::test
