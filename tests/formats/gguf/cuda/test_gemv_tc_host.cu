// The fragment-order repacks of formats/gguf/gemv_tc_cuda.cuh on the host, against the CPU
// dequantizer: every A-fragment element that tc_unpack (NVFP4) or tc_unpack_q8 (Q8_0) yields, times
// its repacked scale, is the CPU's weight bit for bit (padding zero), and the fp16 value the kernel
// forms from it is exact. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "formats/gguf/gemv_tc_cuda.cuh"
#include "gguf_cuda_test_util.h"

namespace tandem::gguf::test {
namespace {

TEST(GemvTcRepack, FragmentsDecodeToTheCpuWeights) {
  using namespace kcuda;
  const QuantType& qt = *find_type("NVFP4");
  uint64_t seed = 71;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 64}, {100, 1216}, {48, 2048}}) {
    const std::vector<uint8_t> bytes = random_weight("NVFP4", m, k, seed++);
    const int64_t rb = row_bytes(qt, k);
    std::vector<float> w(size_t(m * k));
    for (int64_t r = 0; r < m; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * k, k);
    const TcShape s = tc_shape(TcType::NVFP4, m, k);
    ASSERT_EQ(s.steps % kTcSliceSteps, 0);
    const std::vector<uint8_t> rp = repack_nvfp4_tc(bytes.data(), m, k, "w");
    ASSERT_EQ(rp.size(), s.bytes());
    const uint8_t* sc = rp.data() + s.nib_bytes();
    int64_t bad = 0, inexact = 0, nonzero = 0;
    for (int64_t t = 0; t < s.tiles; ++t)
      for (int64_t st = 0; st < s.steps; ++st)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, q = lane & 3;
          uint32_t v;
          // Read where the kernel loads it: load st % 8 / 4 of the group, word st % 4 of it.
          std::memcpy(&v, TcNvfp4W::at(rp.data(), t, s.steps, st / 8, lane, int(st % 8 / 4)) + 4 * (st % 4), 4);
          uint32_t a[4];
          tc_unpack(v, a);
          const uint8_t* rec = sc + ((t * (s.steps / 8) + st / 8) * 8 + g) * 16 + 2 * (st % 8);
          for (int r = 0; r < 4; ++r)
            for (int h = 0; h < 2; ++h) {
              const int64_t row = 16 * t + g + 8 * (r & 1), kk = 16 * st + 2 * q + h + 8 * (r >> 1);
              const float code = f16_bits((a[r] >> (16 * h)) & 0xFFFF);  // e·2^−14
              const float sv = 2.0f * ue4m3_half(rec[r & 1]);
              const float want = row < m && kk < k ? w[size_t(row * k + kk)] : 0.0f;
              if (code * 16384.0f * sv != want) ++bad;
              const float prod = code * sv;  // the kernel's HMUL2
              if (f16_bits(__half_as_ushort(__float2half_rn(prod))) != prod) ++inexact;
              nonzero += want != 0.0f;
            }
        }
    EXPECT_EQ(bad, 0) << "[" << m << ", " << k << "]";
    EXPECT_EQ(inexact, 0) << "[" << m << ", " << k << "]";
    EXPECT_GT(nonzero, m * k / 2) << "[" << m << ", " << k << "]";
  }
}

// Q8_0: register r half h of a lane-step is 1024 + q + 128 in fp16 (q exact after subtracting 1152),
// and the scale record holds the fp16 d of rows g and g + 8 for each k32 block: q·d is the CPU weight.
TEST(GemvTcRepack, Q8FragmentsDecodeToTheCpuWeights) {
  using namespace kcuda;
  const QuantType& qt = *find_type("Q8_0");
  uint64_t seed = 91;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 32}, {100, 1216}, {48, 2048}, {5, 1056}}) {
    const std::vector<uint8_t> bytes = random_weight("Q8_0", m, k, seed++);
    const int64_t rb = row_bytes(qt, k);
    std::vector<float> w(size_t(m * k));
    for (int64_t r = 0; r < m; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * k, k);
    const TcShape s = tc_shape(TcType::Q8_0, m, k);
    const std::vector<uint8_t> rp = repack_q8_0_tc(bytes.data(), m, k, "w");
    ASSERT_EQ(rp.size(), s.bytes());
    ASSERT_EQ(s.nib_bytes(), size_t(s.tiles * s.steps) * 256);
    const uint8_t* sc = rp.data() + s.nib_bytes();
    int64_t bad = 0, nonzero = 0;
    for (int64_t t = 0; t < s.tiles; ++t)
      for (int64_t st = 0; st < s.steps; ++st)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2;
          uint32_t v[2];
          // Read where the kernel loads it: load st % 8 / 2 of the group, the step's half of it.
          std::memcpy(v, TcQ8W::at(rp.data(), t, s.steps, st / 8, lane, int(st % 8 / 2)) + 8 * (st % 2), 8);
          uint32_t a[4];
          tc_unpack_q8(v[0], v[1], a);
          // The record of st's group, then the block's half2 (d_g, d_g+8).
          const uint8_t* rec = sc + ((t * (s.steps / 8) + st / 8) * 8 + g) * 16 + 4 * ((st % 8) / 2);
          for (int r = 0; r < 4; ++r)
            for (int h = 0; h < 2; ++h) {
              const int64_t row = tc_row(t, lane, r), kk = tc_col(st, lane, r, h);
              const float biased = f16_bits((a[r] >> (16 * h)) & 0xFFFF);
              const float q = biased - 1152.0f;  // the kernel's HSUB2: exact for 1024..1279
              uint16_t d16;
              std::memcpy(&d16, rec + 2 * (r & 1), 2);
              const float want = row < m && kk < k ? w[size_t(row * k + kk)] : 0.0f;
              if (biased < 1024.0f || biased > 1279.0f || q * f16_bits(d16) != want) ++bad;
              nonzero += want != 0.0f;
            }
        }
    EXPECT_EQ(bad, 0) << "[" << m << ", " << k << "]";
    EXPECT_GT(nonzero, m * k / 2) << "[" << m << ", " << k << "]";
  }
}

TEST(GemvTcRepack, RejectsRowsThatAreNotWholeBlocks) {
  const std::vector<uint8_t> bytes(36 * 4, 0);
  EXPECT_THROW(kcuda::repack_nvfp4_tc(bytes.data(), 1, 96, "blk.0.ssm_in.weight"), Error);
  EXPECT_THROW(kcuda::repack_q8_0_tc(bytes.data(), 1, 48, "blk.0.attn_q.weight"), Error);
}

}  // namespace
}  // namespace tandem::gguf::test
