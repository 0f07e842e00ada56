// formats/exl3/trellis.*: codebooks, bitstream, tile order and reconstruction against the float64
// decoder of exl3_test_util.h, written from spec/formats.md § 5 alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "exl3_test_util.h"
#include "formats/exl3/exl3_cpu.h"
#include "formats/exl3/trellis.h"
#include "test_util.h"

using namespace tandem;
using exl3::Codebook;

TEST(Exl3Reference, HalfConversionsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf/NaN
    ASSERT_EQ(exl3_ref::double_to_half(exl3_ref::half_to_double(uint16_t(h))), h == 0x8000 ? 0x8000 : h) << h;
  }
  // Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(exl3_ref::double_to_half(1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(exl3_ref::double_to_half(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);
  EXPECT_EQ(exl3_ref::double_to_half(std::ldexp(1.0, -24)), 0x0001);
}

TEST(Exl3Codebook, EveryStateOfEveryCodebookIsBitExact) {
  for (int cb = 0; cb < 3; ++cb) {
    int bad = 0;
    double sum = 0, sq = 0;
    for (uint32_t s = 0; s < 65536; ++s) {
      uint16_t want = exl3_ref::codebook_value(s, cb), got = exl3::state_value_f16(s, Codebook(cb));
      if (want != got && ++bad < 5) ADD_FAILURE() << "codebook " << cb << " state " << s << ": " << got << " != " << want;
      double v = exl3_ref::half_to_double(want);
      sum += v, sq += v * v;
    }
    EXPECT_EQ(bad, 0) << "codebook " << cb;
    // The spec's moments: std 1.24371 (3INST), about 1.2441 (MCG), about 1.0003 (MUL1).
    const double sd = std::sqrt(sq / 65536 - (sum / 65536) * (sum / 65536));
    const double want_sd[3] = {1.24371, 1.2441, 1.0003};
    EXPECT_NEAR(sd, want_sd[cb], 2e-3) << "codebook " << cb;
  }
  // Markers select the codebooks the parser names.
  EXPECT_STREQ(exl3::codebook_name(Codebook::kMul1), "mul1");
}

TEST(Exl3Tile, PermutationMatchesTheSpecAndIsABijection) {
  std::vector<int> seen(256, 0);
  for (int p = 0; p < 256; ++p) {
    ASSERT_EQ(exl3::tile_perm(p), exl3_ref::perm(p)) << p;
    ++seen[size_t(exl3_ref::perm(p))];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 256);
}

TEST(Exl3Tile, StatesPackRoundTripAndTailBiting) {
  std::mt19937_64 g(7);
  for (int K = 1; K <= 8; ++K)
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<uint16_t> words(size_t(16 * K));
      for (auto& w : words) w = uint16_t(g());
      uint16_t states[256];
      exl3::tile_states(words.data(), K, states);
      for (int t = 0; t < 256; ++t) ASSERT_EQ(states[t], exl3_ref::element_state(words.data(), K, t)) << "K " << K << " t " << t;
      // Shift register: each state is the previous one shifted by K with a new K-bit symbol.
      for (int t = 1; t < 256; ++t)
        ASSERT_EQ(states[t] >> K, states[t - 1] & ((1u << (16 - K)) - 1)) << "K " << K << " t " << t;
      ASSERT_EQ(states[0] >> K, states[255] & ((1u << (16 - K)) - 1)) << "K " << K << " (tail-biting)";
      std::vector<uint16_t> packed(words.size());
      exl3::pack_tile(states, K, packed.data());
      ASSERT_EQ(packed, words) << "K " << K;
      // decode_tile and the CPU tensor's fast decoder agree with the reference, bit for bit.
      for (int cb = 0; cb < 3; ++cb) {
        float slow[256], fast[256];
        exl3::decode_tile(words.data(), K, Codebook(cb), slow);
        exl3::decode_tile_fast(words.data(), K, Codebook(cb), fast);
        for (int p = 0; p < 256; ++p) {
          const double want = exl3_ref::half_to_double(exl3_ref::codebook_value(states[p], cb));
          ASSERT_EQ(double(slow[exl3_ref::perm(p)]), want) << "K " << K << " cb " << cb << " p " << p;
          ASSERT_EQ(double(fast[exl3_ref::perm(p)]), want) << "K " << K << " cb " << cb << " p " << p;
        }
      }
    }
}

TEST(Exl3Tile, PackFromSymbolsDecodesBack) {
  // A state sequence built from random symbols with a consistent wrap-around decodes to itself.
  std::mt19937_64 g(11);
  for (int K = 1; K <= 8; ++K) {
    std::vector<uint32_t> sym(256);
    for (auto& s : sym) s = uint32_t(g()) & ((1u << K) - 1);
    uint16_t states[256];
    uint32_t s = 0;
    for (int pass = 0; pass < 2; ++pass)  // the second pass makes the start consistent with the end
      for (int t = 0; t < 256; ++t) s = (s << K | sym[size_t(t)]) & 0xFFFF, states[t] = uint16_t(s);
    std::vector<uint16_t> words(size_t(16 * K));
    exl3::pack_tile(states, K, words.data());
    uint16_t back[256];
    exl3::tile_states(words.data(), K, back);
    for (int t = 0; t < 256; ++t) ASSERT_EQ(back[t], states[t]) << "K " << K << " t " << t;
  }
}

TEST(Exl3Hadamard, IsOrthonormalAndSymmetric) {
  std::vector<float> x = test::random_vec(256, 3), y = x;
  exl3::hadamard128(y.data(), 256);
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 128; ++r) {
      double s = 0;
      for (int c = 0; c < 128; ++c) s += exl3_ref::hadamard(r, c) * x[size_t(b * 128 + c)];
      ASSERT_NEAR(y[size_t(b * 128 + r)], s, 1e-6);
    }
  exl3::hadamard128(y.data(), 256);
  EXPECT_LT(test::max_abs_diff(x, y), 1e-6);
}

namespace {

void expect_reconstruction(int64_t k, int64_t n, int K, int cb, int64_t in, int64_t out, uint64_t seed) {
  exl3_test::RandomLinear lin(k, n, K, cb, seed);
  exl3_test::GroupBuilder b;
  lin.store(b, "w");
  exl3::Layout l = exl3::parse_group(b.group("w", {out, in}));
  ASSERT_EQ(l.K, K);
  ASSERT_EQ(int(l.codebook), cb);
  std::vector<float> got = exl3::reconstruct(l);
  std::vector<double> want = lin.reference(in, out);
  ASSERT_EQ(got.size(), want.size());
  double peak = 0;
  for (double v : want) peak = std::max(peak, std::abs(v));
  EXPECT_LT(test::max_abs_diff(got, want), 1e-5 * peak) << k << "×" << n << " K " << K << " cb " << cb;
}

}  // namespace

TEST(Exl3Reconstruct, EveryKAndCodebookMatchesFloat64) {
  for (int K = 1; K <= 8; ++K)
    for (int cb = 0; cb < 3; ++cb) {
      expect_reconstruction(128, 256, K, cb, 128, 256, uint64_t(100 * K + cb));
      expect_reconstruction(256, 128, K, cb, 256, 128, uint64_t(1000 * K + cb));
    }
}

TEST(Exl3Reconstruct, TrimsPaddingAndReadsLegacySignBits) {
  expect_reconstruction(128, 256, 3, 2, 100, 200, 5);
  // Legacy su/sv: int16 words whose bit i gives element 16w + i, set = −1.
  exl3_test::RandomLinear lin(128, 128, 4, 0, 9);
  std::mt19937_64 g(13);
  std::vector<uint16_t> su(8), sv(8);
  for (auto& w : su) w = uint16_t(g());
  for (auto& w : sv) w = uint16_t(g());
  for (int i = 0; i < 128; ++i) {
    lin.suh[size_t(i)] = su[size_t(i / 16)] >> (i % 16) & 1 ? 0xBC00 : 0x3C00;  // ∓1.0 in fp16
    lin.svh[size_t(i)] = sv[size_t(i / 16)] >> (i % 16) & 1 ? 0xBC00 : 0x3C00;
  }
  exl3_test::GroupBuilder b;
  b.add_words("w.trellis", {8, 8, 64}, lin.trellis);
  b.add_words("w.su", {8}, su);
  b.add_words("w.sv", {8}, sv);
  std::vector<float> got = exl3::reconstruct(exl3::parse_group(b.group("w")));
  std::vector<double> want = lin.reference(128, 128);
  double peak = 0;
  for (double v : want) peak = std::max(peak, std::abs(v));
  EXPECT_LT(test::max_abs_diff(got, want), 1e-5 * peak);
}
