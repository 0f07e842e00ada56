// The EXL3 quantizer: tile encoders against the bitstream contract, MSE per bit width and codebook,
// LDLQ against plain tile-wise encoding under a non-identity Hessian.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "quant_test_util.h"

namespace tandem::exl3 {
namespace {

using test::decode_linear;
using test::gaussian;
using test::mse;

TEST(Exl3Encoder, TilesAreConsistentAndRoundTrip) {
  for (Codebook cb : {Codebook::kMul1, Codebook::kMcg, Codebook::k3Inst})
    for (int K = 1; K <= 8; ++K) {
      SCOPED_TRACE(std::string(codebook_name(cb)) + " K=" + std::to_string(K));
      auto x = gaussian(256, 100 + K, float(codebook_std(cb)));
      uint16_t states[256], greedy[256], back[256];
      auto t0 = std::chrono::steady_clock::now();
      double e = encode_tile(x.data(), K, cb, states);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (cb == Codebook::kMul1) std::printf("encode_tile K=%d: %.1f ms\n", K, ms);
      double eg = encode_tile_greedy(x.data(), K, cb, greedy);
      EXPECT_TRUE(states_consistent(states, K));
      EXPECT_TRUE(states_consistent(greedy, K));
      EXPECT_LE(e, eg);
      std::vector<uint16_t> words(size_t(16 * K));
      pack_tile(states, K, words.data());
      tile_states(words.data(), K, back);
      for (int p = 0; p < 256; ++p) ASSERT_EQ(back[p], states[p]) << "position " << p;
      float out[256];
      decode_tile(words.data(), K, cb, out);
      double d = 0;
      for (int p = 0; p < 256; ++p) d += (double(out[tile_perm(p)]) - x[size_t(p)]) * (double(out[tile_perm(p)]) - x[size_t(p)]);
      EXPECT_NEAR(d, e, 1e-6 * (1 + e));
    }
}

// Relative MSE (MSE / weight variance) of a Gaussian 256 × 128 linear, through parse_group +
// reconstruct. The table goes to docs/exl3-quantization.md.
double rel_mse(int K, Codebook cb, int64_t out = 256, int64_t in = 128) {
  auto w = gaussian(size_t(out * in), 7, 0.02f);
  QuantOptions o;
  o.bits = K, o.codebook = cb, o.seed = 11;
  QuantizedLinear q = quantize_linear(w.data(), out, in, nullptr, o);
  return mse(decode_linear(q), w) / (0.02 * 0.02);
}

TEST(Exl3Quantize, MseFallsAboutFourfoldPerBit) {
  struct Row { Codebook cb; std::vector<int> bits; };
  const Row rows[] = {{Codebook::kMul1, {1, 2, 3, 4, 5, 6, 8}}, {Codebook::kMcg, {2, 3, 4}}, {Codebook::k3Inst, {2, 3, 4}}};
  for (const Row& r : rows) {
    std::vector<double> m;
    for (int K : r.bits) {
      auto t0 = std::chrono::steady_clock::now();
      m.push_back(rel_mse(K, r.cb));
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-5s K=%d relative MSE %.5f (%.2f s)\n", codebook_name(r.cb), K, m.back(), s);
    }
    for (size_t i = 0; i + 1 < r.bits.size(); ++i) {
      if (r.bits[i] < 2 || r.bits[i + 1] > 4) continue;  // the 4× rule holds in the middle of the range
      double ratio = m[i] / m[i + 1];
      EXPECT_GT(ratio, 2.5) << codebook_name(r.cb) << " K " << r.bits[i] << " → " << r.bits[i + 1];
      EXPECT_LT(ratio, 6.0) << codebook_name(r.cb) << " K " << r.bits[i] << " → " << r.bits[i + 1];
    }
    for (size_t i = 0; i + 1 < m.size(); ++i) EXPECT_LT(m[i + 1], m[i]);
  }
}

TEST(Exl3Quantize, PaddedShapesReconstruct) {
  // 100 outputs × 200 inputs: stored as 256 × 128 (in × out), trimmed back through TensorGroup::shape.
  auto w = gaussian(100 * 200, 3, 0.05f);
  QuantOptions o;
  o.bits = 4, o.seed = 5;
  QuantizedLinear q = quantize_linear(w.data(), 100, 200, nullptr, o);
  EXPECT_EQ(q.k, 256);
  EXPECT_EQ(q.n, 128);
  auto back = decode_linear(q);
  ASSERT_EQ(back.size(), w.size());
  EXPECT_LT(mse(back, w) / (0.05 * 0.05), 0.02);
}

// Correlated activations X = Z·A (rows × in), H = XᵀX / rows; proxy loss tr((W − Ŵ) H (W − Ŵ)ᵀ).
TEST(Exl3Quantize, LdlqBeatsTileWiseEncodingUnderAHessian) {
  const int64_t in = 128, out = 128, rows = 512;
  auto z = gaussian(size_t(rows * in), 21);
  auto a = gaussian(size_t(in * in), 22, 1.0f / std::sqrt(float(in)));
  for (int64_t i = 0; i < in; ++i) a[size_t(i * in + i)] += 1.0f;
  std::vector<float> x(size_t(rows * in), 0.0f), h(size_t(in * in), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < in; ++p)
      for (int64_t c = 0; c < in; ++c) x[size_t(r * in + c)] += z[size_t(r * in + p)] * a[size_t(p * in + c)];
  // A few input channels much louder than the rest, as in real activations.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < in; c += 16) x[size_t(r * in + c)] *= 8.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < in; ++j) h[size_t(i * in + j)] += x[size_t(r * in + i)] * x[size_t(r * in + j)] / float(rows);
  auto w = gaussian(size_t(out * in), 23, 0.02f);
  auto proxy = [&](const std::vector<float>& wq) {
    double s = 0;
    std::vector<double> e(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) e[size_t(i)] = double(w[size_t(o * in + i)]) - wq[size_t(o * in + i)];
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < in; ++j) s += e[size_t(i)] * h[size_t(i * in + j)] * e[size_t(j)];
    }
    return s;
  };
  for (int K : {2, 4}) {
    QuantOptions o;
    o.bits = K, o.seed = 9;
    double with = proxy(decode_linear(quantize_linear(w.data(), out, in, h.data(), o)));
    o.ldlq = false;
    double without = proxy(decode_linear(quantize_linear(w.data(), out, in, h.data(), o)));
    std::printf("K=%d proxy loss: LDLQ %.4g, tile-wise %.4g (%.1f%% lower)\n", K, with, without,
                100 * (1 - with / without));
    EXPECT_LT(with, 0.9 * without) << "K=" << K;
  }
}

}  // namespace
}  // namespace tandem::exl3
