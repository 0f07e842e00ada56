// Tensors quantized by exllamav3 itself (tests/fixtures/exl3/, README there): the EXL3 group as
// exllamav3 wrote it and what exllamav3 computed from it (decoded trellis, reconstructed weight,
// x·W outputs), read with our safetensors reader. Shared by the CPU and the CUDA reference tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exl3_test_util.h"
#include "formats/safetensors/safetensors_file.h"
#include "test_util.h"

namespace tandem::exl3_test {

struct Exl3Reference {
  std::string name, path;
  std::unique_ptr<safetensors::Mapping> map;
  std::vector<RawTensor> tensors;

  const RawTensor& at(const std::string& n) const {
    for (const auto& t : tensors)
      if (t.name == n) return t;
    throw std::runtime_error(path + ": no tensor '" + n + "'");
  }
  bool has(const std::string& n) const {
    return std::any_of(tensors.begin(), tensors.end(), [&](const RawTensor& t) { return t.name == n; });
  }
  // The EXL3 group "linear" as the loader would hand it over, for [out, in] = [256, 256].
  TensorGroup group() const {
    TensorGroup g;
    g.prefix = "linear";
    for (const auto& t : tensors)
      if (t.name.rfind("linear.", 0) == 0) g.members.push_back(&t);
    g.shape = {at("linear.svh").shape[0], at("linear.suh").shape[0]};
    return g;
  }
  // Elements as double (F16 or F32), row-major.
  std::vector<double> values(const std::string& n) const {
    const RawTensor& t = at(n);
    std::vector<double> v;
    if (t.dtype == "F16") {
      v.resize(t.nbytes / 2);
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);  // exllamav3 does not align tensor data
        v[i] = exl3_ref::half_to_double(h);
      }
    } else if (t.dtype == "F32") {
      v.resize(t.nbytes / 4);
      for (size_t i = 0; i < v.size(); ++i) {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        v[i] = f;
      }
    } else {
      throw std::runtime_error(path + ": tensor '" + n + "' is " + t.dtype + ", expected F16 or F32");
    }
    return v;
  }
  std::vector<uint16_t> half_bits(const std::string& n) const {
    const RawTensor& t = at(n);
    std::vector<uint16_t> v(t.nbytes / 2);
    std::memcpy(v.data(), t.data, t.nbytes);
    return v;
  }
  int64_t rows(const std::string& n) const { return at(n).shape[0]; }
};

inline const char* kReferenceCases[] = {"s256x256_k2_mul1_hidentity", "s256x256_k4_3inst_hidentity",
                                        "s256x256_k6_mcg_hidentity"};

// Loads tests/fixtures/exl3/<name>.safetensors; a missing file fails the caller with how to get it.
inline std::unique_ptr<Exl3Reference> load_reference(const std::string& name) {
  auto r = std::make_unique<Exl3Reference>();
  r->name = name;
  r->path = test::data_path("exl3/" + name + ".safetensors");
  if (!std::filesystem::exists(r->path)) {
    ADD_FAILURE() << "missing fixture " << r->path
                  << ": copy it from shared/data/exl3/ (made by exllamav3 1.4.1, see tests/fixtures/exl3/README.md)";
    return nullptr;
  }
  r->map = std::make_unique<safetensors::Mapping>(r->path);
  r->tensors = safetensors::parse_file(r->map->data(), r->map->size(), r->path);
  return r;
}

// W (in × out, exllamav3's orientation) in float64 from exllamav3's own decoded trellis:
// diag(suh)·H·Ŵ·H·diag(svh) with the orthonormal 128-point Hadamard.
inline std::vector<double> weight_from_w_hat(const Exl3Reference& r) {
  const std::vector<double> w = r.values("ref.w_hat_fp16"), su = r.values("linear.suh"), sv = r.values("linear.svh");
  const int64_t k = int64_t(su.size()), n = int64_t(sv.size());
  std::vector<double> a(size_t(k * n), 0.0), out(size_t(k * n), 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t q = i / 128 * 128; q < i / 128 * 128 + 128; ++q) {
      const double h = exl3_ref::hadamard(int(i % 128), int(q % 128));
      for (int64_t c = 0; c < n; ++c) a[size_t(i * n + c)] += h * w[size_t(q * n + c)];
    }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double s = 0;
      for (int64_t q = c / 128 * 128; q < c / 128 * 128 + 128; ++q)
        s += a[size_t(i * n + q)] * exl3_ref::hadamard(int(q % 128), int(c % 128));
      out[size_t(i * n + c)] = su[size_t(i)] * s * sv[size_t(c)];
    }
  return out;
}

// y = x·W in float64, x rows × k, W k × n.
inline std::vector<double> matmul64(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t k,
                                    int64_t n) {
  std::vector<double> y(size_t(rows * n), 0.0);
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t c = 0; c < n; ++c) y[size_t(a * n + c)] += x[size_t(a * k + i)] * w[size_t(i * n + c)];
  return y;
}

// max |a − b| / max |ref|.
template <class A, class B>
double rel_max_error(const A& a, const B& b, const std::vector<double>& ref) {
  double peak = 0;
  for (double v : ref) peak = std::max(peak, std::abs(v));
  return test::max_abs_diff(a, b) / peak;
}

}  // namespace tandem::exl3_test
