// The IQ2_XXS fragment-order repack of formats/gguf/gemv_tc_iq2_cuda.cuh on the host, against the CPU
// dequantizer: every A-fragment element a lane decodes (grid entry from the tables, sign mask XOR,
// scale nibble gathered from its four lanes' bits, d of the row) is the CPU's weight at the permuted k
// bit for bit (padding rows zero), the fp16 product grid·(2·s4 + 1) the kernel forms is exact, and the
// B fragment's four consecutive activations are the same permutation. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "formats/gguf/gemv_tc_iq2_cuda.cuh"
#include "gguf_cuda_test_util.h"

namespace tandem::gguf::test {
namespace {

float half_at(const std::vector<uint8_t>& t, size_t off) {
  uint16_t h;
  std::memcpy(&h, t.data() + off, 2);
  return kcuda::f16_bits(h);
}

TEST(GemvTcIq2Repack, FragmentsDecodeToTheCpuWeights) {
  using namespace kcuda;
  const QuantType& qt = *find_type("IQ2_XXS");
  const std::vector<uint8_t> tab = iq2tc_tables();
  ASSERT_EQ(tab.size(), size_t(kIq2TableBytes));
  uint64_t seed = 91;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 256}, {100, 1280}, {48, 2304}}) {
    const std::vector<uint8_t> bytes = random_weight("IQ2_XXS", m, k, seed++);
    const int64_t rb = row_bytes(qt, k);
    std::vector<float> w(size_t(m * k));
    for (int64_t r = 0; r < m; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * k, k);
    const Iq2TcShape s = iq2tc_shape(m, k);
    const std::vector<uint8_t> rp = repack_iq2_xxs_tc(bytes.data(), m, k, "w");
    ASSERT_EQ(rp.size(), s.bytes());
    if (m % 16 == 0) EXPECT_EQ(rp.size(), bytes.size()) << "the repack keeps the file's bytes";
    int64_t bad = 0, inexact = 0, nonzero = 0, seen = 0;
    for (int64_t t = 0; t < s.tiles; ++t)
      for (int64_t b = 0; b < s.blocks; ++b) {
        uint32_t words[32][8], sbits[32];
        for (int lane = 0; lane < 32; ++lane) {
          for (int j = 0; j < 8; ++j)
            std::memcpy(&words[lane][j], rp.data() + (((t * s.blocks + b) * 2 + j / 4) * 32 + lane) * 16 + 4 * (j % 4), 4);
          sbits[lane] = iq2tc_scale_bits(words[lane]);
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, q = lane & 3;
          const uint32_t sq[4] = {sbits[4 * g], sbits[4 * g + 1], sbits[4 * g + 2], sbits[4 * g + 3]};
          uint32_t dw;
          std::memcpy(&dw, rp.data() + s.qs_bytes() + ((t * s.blocks + b) * 8 + g) * 4, 4);
          for (int j = 0; j < 8; ++j)
            for (int rr = 0; rr < 2; ++rr) {
              const int64_t row = 16 * t + g + 8 * rr;
              const uint32_t idx = iq2tc_idx(words[lane][j], rr), sg = iq2tc_sign(words[lane][j], rr);
              const float mul = float(2 * iq2tc_scale(sq, j, rr) + 1);
              const float d = f16_bits((dw >> (16 * rr)) & 0xFFFF) * 0.125f;
              for (int e = 0; e < 8; ++e) {
                uint16_t sm;
                std::memcpy(&sm, tab.data() + 4096 + 16 * sg + 2 * e, 2);
                const float gv = half_at(tab, 16 * idx + 2 * e) * (sm == 0x8000 ? -1.0f : 1.0f);
                const float prod = gv * mul;  // the kernel's HMUL2
                if (f16_bits(f32_to_f16(prod)) != prod || std::abs(prod) > 1333) ++inexact;
                // Register: step 2j + e / 4, A column 2q + e % 2 + 8·((e / 2) % 2).
                const int st = 2 * j + e / 4, c = 2 * q + (e & 1) + 8 * ((e >> 1) & 1);
                const int64_t kk = b * 256 + iq2tc_k(st, c);
                const float want = row < m ? w[size_t(row * k + kk)] : 0.0f;
                if (prod * d != want) ++bad;
                nonzero += want != 0.0f;
                ++seen;
              }
            }
        }
      }
    EXPECT_EQ(seen, s.tiles * 16 * k);
    EXPECT_EQ(bad, 0) << "[" << m << ", " << k << "]";
    EXPECT_EQ(inexact, 0) << "[" << m << ", " << k << "]";
    EXPECT_EQ(nonzero, m * k) << "[" << m << ", " << k << "]";  // IQ2_XXS grid values are never 0
  }
}

// iq2tc_k is a permutation of a block's 256 offsets, and the B fragment of lane (g, q) at step st
// (columns 2q, 2q + 1 | 2q + 8, 2q + 9) is the four consecutive activations the kernel stages.
TEST(GemvTcIq2Repack, KOrderIsAPermutationAndBFragmentsAreConsecutive) {
  std::vector<int> hits(256, 0);
  for (int st = 0; st < 16; ++st)
    for (int c = 0; c < 16; ++c) ++hits[size_t(kcuda::iq2tc_k(st, c))];
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 256);
  for (int st = 0; st < 16; ++st)
    for (int q = 0; q < 4; ++q) {
      const int base = 32 * (st / 2) + 8 * q + 4 * (st % 2);
      EXPECT_EQ(kcuda::iq2tc_k(st, 2 * q), base);
      EXPECT_EQ(kcuda::iq2tc_k(st, 2 * q + 1), base + 1);
      EXPECT_EQ(kcuda::iq2tc_k(st, 2 * q + 8), base + 2);
      EXPECT_EQ(kcuda::iq2tc_k(st, 2 * q + 9), base + 3);
    }
}

TEST(GemvTcIq2Repack, RejectsRowsThatAreNotWholeBlocks) {
  const std::vector<uint8_t> bytes(66 * 4, 0);
  EXPECT_THROW(kcuda::repack_iq2_xxs_tc(bytes.data(), 1, 384, "blk.0.ffn_up_exps.weight"), Error);
  EXPECT_THROW(kcuda::repack_iq2_xxs_tc(bytes.data(), 0, 256, "blk.0.ffn_up_exps.weight"), Error);
}

}  // namespace
}  // namespace tandem::gguf::test
