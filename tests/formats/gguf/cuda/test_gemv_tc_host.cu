// The NVFP4 fragment-order repack of formats/gguf/gemv_tc_cuda.cuh on the host, against the CPU
// dequantizer: every A-fragment element that tc_unpack yields, times its repacked scale, is the CPU's
// weight bit for bit (padding zero), and the fp16 product the kernel forms is exact. No GPU needed.
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
    const TcShape s = tc_shape(m, k);
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
          std::memcpy(&v, rp.data() + ((t * (s.steps / 4) + st / 4) * 32 + lane) * 16 + 4 * (st % 4), 4);
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

TEST(GemvTcRepack, RejectsRowsThatAreNotWholeBlocks) {
  const std::vector<uint8_t> bytes(36 * 4, 0);
  EXPECT_THROW(kcuda::repack_nvfp4_tc(bytes.data(), 1, 96, "blk.0.ssm_in.weight"), Error);
}

}  // namespace
}  // namespace tandem::gguf::test
