// EXL3 test helpers: an independent float64 decoder written from spec/formats.md § 5.3–5.6 (it calls
// nothing in formats/exl3), and in-memory tensor groups with random trellis words.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tandem/weights.h"

namespace tandem::exl3_ref {

// fp16 bits → double, by the IEEE binary16 definition.
inline double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = h >> 10 & 0x1F, man = h & 0x3FF;
  double v;
  if (exp == 0) v = std::ldexp(double(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(double(1024 + man), exp - 25);
  return sign ? -v : v;
}

// double → fp16 bits, round to nearest even (one rounding; finite inputs in fp16 range).
inline uint16_t double_to_half(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                  // a = f·2^e, f in [0.5, 1)
  int exp = std::max(e - 1, -14);      // unbiased exponent, subnormals share −14
  double q = std::ldexp(a, 10 - exp);  // mantissa in units of the last place
  double r = std::nearbyint(q);        // default rounding mode: to nearest even
  auto bits = uint32_t(r);
  if (exp == -14 && bits < 1024) return uint16_t(sign | bits);  // subnormal
  if (bits == 2048) bits = 1024, ++exp;                         // rounded up to the next binade
  if (exp > 15) return uint16_t(sign | 0x7C00);
  return uint16_t(sign | uint32_t(exp + 15) << 10 | (bits - 1024));
}

// § 5.6: codebook 0 = 3INST, 1 = MCG, 2 = MUL1; the value of a 16-bit state as fp16 bits.
inline uint16_t codebook_value(uint32_t s, int cb) {
  s &= 0xFFFF;
  if (cb == 2) {
    uint32_t x = s * 0x83DCD12Du;
    uint32_t bs = 0;
    for (int b = 0; b < 4; ++b) bs += x >> (8 * b) & 0xFF;
    double h = 1024.0 + bs;  // fp16 bits 0x6400 + bs
    return double_to_half(h * half_to_double(0x1EEE) + half_to_double(0xC931));
  }
  uint32_t x = cb == 1 ? s * 0xCBAC1FEDu : s * 89226354u + 64248484u;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  return double_to_half(half_to_double(uint16_t(x & 0xFFFF)) + half_to_double(uint16_t(x >> 16)));
}

// § 5.5, kernel form: state of element t from the tile's 16·K int16 words.
inline uint32_t element_state(const uint16_t* p, int K, int t) {
  const int nw = 8 * K;
  auto W = [&](int i) { return uint32_t(p[2 * i]) | uint32_t(p[2 * i + 1]) << 16; };
  const int b0 = t * K + K - 16 + 256 * K;
  const int i0 = b0 / 32, i1 = (b0 + 15) / 32;
  const int s = (i1 + 1) * 32 - (b0 + 16);
  const uint64_t funnel = (uint64_t(W(i0 % nw)) << 32 | W(i1 % nw)) >> (s & 31);
  return uint32_t(funnel) & 0xFFFF;
}

// § 5.4: stream position p → r·16 + c.
inline int perm(int p) {
  const int t = p / 8, jj = p % 8;
  const int r0 = (t % 4) * 2;
  const int r = r0 + (jj % 4 == 0 ? 0 : jj % 4 == 1 ? 1 : jj % 4 == 2 ? 8 : 9);
  const int c = t / 4 + (jj < 4 ? 0 : 8);
  return r * 16 + c;
}

// H128/√128 entry, § 5.3.
inline double hadamard(int a, int b) { return (__builtin_popcount(unsigned(a & b)) & 1 ? -1.0 : 1.0) / std::sqrt(128.0); }

// W (out_features × in_features, model orientation) in double from raw storage:
// W_kn = diag(suh)·H_k·Ŵ·H_n·diag(svh), then W[o][i] = W_kn[i][o].
inline std::vector<double> reconstruct(const uint16_t* trellis, int64_t k, int64_t n, int K, int cb,
                                       const std::vector<double>& suh, const std::vector<double>& svh,
                                       int64_t in_features, int64_t out_features) {
  std::vector<double> w(size_t(k * n));
  for (int64_t ti = 0; ti < k / 16; ++ti)
    for (int64_t tj = 0; tj < n / 16; ++tj) {
      const uint16_t* p = trellis + (ti * (n / 16) + tj) * 16 * K;
      for (int e = 0; e < 256; ++e) {
        const int rc = perm(e);
        w[size_t((ti * 16 + rc / 16) * n + tj * 16 + rc % 16)] = half_to_double(codebook_value(element_state(p, K, e), cb));
      }
    }
  std::vector<double> a(size_t(k * n), 0.0);  // H_k·Ŵ
  for (int64_t r = 0; r < k; ++r)
    for (int64_t q = r / 128 * 128; q < r / 128 * 128 + 128; ++q) {
      const double h = hadamard(int(r % 128), int(q % 128));
      for (int64_t c = 0; c < n; ++c) a[size_t(r * n + c)] += h * w[size_t(q * n + c)];
    }
  std::vector<double> out(size_t(out_features * in_features));
  for (int64_t r = 0; r < in_features; ++r)
    for (int64_t c = 0; c < out_features; ++c) {
      double s = 0;
      for (int64_t q = c / 128 * 128; q < c / 128 * 128 + 128; ++q) s += a[size_t(r * n + q)] * hadamard(int(q % 128), int(c % 128));
      out[size_t(c * in_features + r)] = suh[size_t(r)] * s * svh[size_t(c)];
    }
  return out;
}

}  // namespace tandem::exl3_ref

namespace tandem::exl3_test {

// Builds tensor groups in memory: RawTensors pointing into owned byte vectors.
class GroupBuilder {
 public:
  const RawTensor* add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                       std::vector<uint8_t> bytes) {
    data_.push_back(std::move(bytes));
    RawTensor t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = data_.back().data();
    t.nbytes = data_.back().size();
    t.file = "memory";
    raw_.push_back(std::move(t));
    return &raw_.back();
  }
  const RawTensor* add_words(const std::string& name, std::vector<int64_t> shape, const std::vector<uint16_t>& w,
                             const std::string& dtype = "I16") {
    std::vector<uint8_t> b(w.size() * 2);
    std::memcpy(b.data(), w.data(), b.size());
    return add(name, dtype, std::move(shape), std::move(b));
  }
  const RawTensor* add_f16(const std::string& name, const std::vector<uint16_t>& h) {
    return add_words(name, {int64_t(h.size())}, h, "F16");
  }
  const RawTensor* add_i32(const std::string& name, uint32_t v, std::vector<int64_t> shape = {}) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &v, 4);
    return add(name, "I32", std::move(shape), std::move(b));
  }
  TensorGroup group(const std::string& prefix, std::vector<int64_t> shape = {}) const {
    TensorGroup g;
    g.prefix = prefix;
    for (const auto& t : raw_)
      if (t.name.compare(0, prefix.size() + 1, prefix + ".") == 0) g.members.push_back(&t);
    g.shape = std::move(shape);
    return g;
  }

 private:
  std::deque<std::vector<uint8_t>> data_;
  std::deque<RawTensor> raw_;
};

// One random EXL3 linear as raw storage: k × n padded, K bits, codebook cb (0 3inst, 1 mcg, 2 mul1).
// suh = ±U(0.5, 1.5)·suh_gain and svh = ±U(0.5, 1.5), both as fp16 bits.
struct RandomLinear {
  int64_t k = 0, n = 0;
  int K = 0, cb = 0;
  std::vector<uint16_t> trellis, suh, svh, bias;

  RandomLinear(int64_t k_, int64_t n_, int K_, int cb_, uint64_t seed, double suh_gain = 1.0) : k(k_), n(n_), K(K_), cb(cb_) {
    std::mt19937_64 g(seed);
    trellis.resize(size_t(k / 16 * n / 16 * 16 * K));
    for (auto& w : trellis) w = uint16_t(g());
    std::uniform_real_distribution<double> mag(0.5, 1.5);
    auto scale = [&](int64_t len, double gain) {
      std::vector<uint16_t> v(static_cast<size_t>(len));
      for (auto& x : v) x = exl3_ref::double_to_half((g() & 1 ? -1 : 1) * mag(g) * gain);
      return v;
    };
    suh = scale(k, suh_gain);
    svh = scale(n, 1.0);
  }
  void add_bias(int64_t len, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> d(-1, 1);
    bias.resize(size_t(len));
    for (auto& x : bias) x = exl3_ref::double_to_half(d(g));
  }
  // Adds prefix.trellis, .suh, .svh, (.bias), and the codebook marker to b.
  void store(GroupBuilder& b, const std::string& prefix) const {
    b.add_words(prefix + ".trellis", {k / 16, n / 16, 16 * K}, trellis);
    b.add_f16(prefix + ".suh", suh);
    b.add_f16(prefix + ".svh", svh);
    if (!bias.empty()) b.add_f16(prefix + ".bias", bias);
    if (cb == 1) b.add_i32(prefix + ".mcg", 0xCBAC1FEDu);
    if (cb == 2) b.add_i32(prefix + ".mul1", 0x83DCD12Du);
  }
  std::vector<double> reference(int64_t in_features, int64_t out_features) const {
    std::vector<double> su(suh.size()), sv(svh.size());
    for (size_t i = 0; i < su.size(); ++i) su[i] = exl3_ref::half_to_double(suh[i]);
    for (size_t i = 0; i < sv.size(); ++i) sv[i] = exl3_ref::half_to_double(svh[i]);
    return exl3_ref::reconstruct(trellis.data(), k, n, K, cb, su, sv, in_features, out_features);
  }
};

}  // namespace tandem::exl3_test
