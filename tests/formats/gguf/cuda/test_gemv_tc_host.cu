// The fragment-order repacks of formats/gguf/gemv_tc_cuda.cuh on the host, against the CPU
// dequantizer: every A-fragment element that tc_unpack (NVFP4) or tc_unpack_q8 (Q8_0) yields, times
// its repacked scale, is the CPU's weight bit for bit (padding zero), and the fp16 value the kernel
// forms from it is exact. No GPU needed. Also the one-copy readers of gemm_tc_cuda.cuh: tc_element (the
// row decoder's body) gives the CPU's weights bit for bit, and the prefill GEMM's fragments built
// from the repack (the Q8_0 quad transpose emulated lane by lane) are gemm_kernel's: the weight
// elements Mma<Q>::place puts at each lane and register.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "formats/gguf/gemm_tc_cuda.cuh"
#include "gguf_cuda_test_util.h"

namespace tandem::gguf::test {
namespace {

TEST(GemvTcRepack, FragmentsDecodeToTheCpuWeights) {
  using namespace kcuda;
  const QuantType& qt = *find_type("NVFP4");
  uint64_t seed = 71;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 64}, {100, 1216}, {48, 2048}}) {
    const std::vector<uint8_t> bytes = random_weight("NVFP4", m, k, seed++);
    const std::vector<float> w = dequantize_rows(qt, bytes, m, k);
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
    const std::vector<float> w = dequantize_rows(qt, bytes, m, k);
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

// Every element of the repacked copy, decoded by tc_element (with and without a sidecar scale), is
// the CPU dequantizer's value bit for bit: the rows kernel (get_rows, dequantize) of a one-copy tensor.
TEST(GemmTcRepack, ElementsRoundTripToTheCpuValues) {
  using namespace kcuda;
  uint64_t seed = 301;
  for (const char* type : {"NVFP4", "Q8_0"}) {
    const QuantType& qt = *find_type(type);
    const TcType tt = *tc_type_of(type);
    for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 64}, {100, 1216}, {17, 2112}}) {
      if (k % qt.block_elems) continue;
      std::vector<uint8_t> bytes = random_weight(type, m, k, seed++);
      if (tt == TcType::NVFP4) {  // every scale byte the repack keeps: bit 7 (ignored), 0x00 and 0x7F (zero)
        const uint8_t special[] = {0x00, 0x7F, 0x80, 0xC1, 0x01, 0x7E};
        for (size_t i = 0; i < 6; ++i) bytes[36 * (3 * i + 1) + i % 4] = special[i];
      }
      ASSERT_TRUE(tc_repack_is_lossless(tt, bytes.data(), m, k));
      const std::vector<float> w = dequantize_rows(qt, bytes, m, k);
      const TcShape s = tc_shape(tt, m, k);
      const std::vector<uint8_t> rp = repack_tc(tt, bytes.data(), m, k, "w");
      int64_t bad = 0, bad_scaled = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t kk = 0; kk < k; ++kk) {
          const float want = w[size_t(r * k + kk)], got = tc_element(rp.data(), s, r, kk, 1.0f);
          bad += std::memcmp(&want, &got, 4) != 0;
          const float ws = want * -0.75f, gs = tc_element(rp.data(), s, r, kk, -0.75f);
          bad_scaled += std::memcmp(&ws, &gs, 4) != 0;
        }
      EXPECT_EQ(bad, 0) << type << " [" << m << ", " << k << "]";
      EXPECT_EQ(bad_scaled, 0) << type << " [" << m << ", " << k << "] scaled";
    }
  }
  // 0xFF (ue4m3_half 240) has no repacked code: such a tensor keeps its blocks.
  std::vector<uint8_t> bytes = random_weight("NVFP4", 16, 128, 7);
  bytes[36 + 2] = 0xFF;
  EXPECT_FALSE(kcuda::tc_repack_is_lossless(kcuda::TcType::NVFP4, bytes.data(), 16, 128));
}

// The prefill GEMM's A fragments from the staged repack, emulated on the host: for group u of a
// tile, lane (g, q) register j of row g (wa) and g + 8 (wb) must hold the weight elements that
// gemm_kernel's Mma<Q>::group gives it, i.e. element e of the group where place(e) = (q, 2j + half),
// as the same small integers (Q8_0: the biased byte q + 128; NVFP4: 2·E2M1) with the same scale.
TEST(GemmTcRepack, PrefillFragmentsAreTheBlockGemmsFragments) {
  using namespace kcuda;
  uint64_t seed = 401;
  for (const char* type : {"NVFP4", "Q8_0"}) {
    const QuantType& qt = *find_type(type);
    const TcType tt = *tc_type_of(type);
    const int64_t m = 40, k = 1152;  // 3 tiles (the last padded), 36 groups, a second slice
    const std::vector<uint8_t> bytes = random_weight(type, m, k, seed++);
    const std::vector<float> w = dequantize_rows(qt, bytes, m, k);
    const TcShape s = tc_shape(tt, m, k);
    const std::vector<uint8_t> rp = repack_tc(tt, bytes.data(), m, k, "w");
    // The byte layout of place: element e of a 32-group sits at lane class q, slot (register 2j + h).
    auto element_of = [&](int q, int reg, int h) {
      for (int e = 0; e < 32; ++e) {
        int qq, sl;
        if (tt == TcType::NVFP4) {
          const int j = e >> 4, r = e & 15, hh = r >> 3, v = r & 7;
          qq = v >> 1, sl = 4 * j + 2 * hh + (v & 1);
        } else {
          qq = e >> 3, sl = e & 7;
        }
        if (qq == q && sl == 2 * reg + h) return e;
      }
      return -1;
    };
    int64_t bad = 0, checked = 0;
    for (int64_t t = 0; t < s.tiles; ++t)
      for (int64_t gstep = 0; gstep < k / 64; ++gstep) {
        // The tile's staged step: words (W::word_at), then its 8 scale records.
        const int64_t at = tt == TcType::NVFP4 ? GemmTcNvfp4::word_at(t, s.steps, gstep) : GemmTcQ8::word_at(t, s.steps, gstep);
        const uint8_t* tile = rp.data() + at;
        const uint8_t* rec0 = rp.data() + s.nib_bytes() + (t * (s.steps / 8) + gstep / 2) * 128;
        for (int gi = 0; gi < 2; ++gi) {
          const int64_t u = 2 * gstep + gi;  // the group (k32) index
          uint32_t regs[32][2][4];           // [lane][row half][register]: fp16 or biased-byte pairs
          float sc[32][2][2];                // [lane][row half][js]
          if (tt == TcType::Q8_0) {
            uint32_t wq[32][4];
            for (int lane = 0; lane < 32; ++lane) std::memcpy(wq[lane], tile + 512 * gi + 16 * lane, 16);
            // quad_transpose, round by round over the quads.
            auto round = [&](auto bit) {
              constexpr int B = decltype(bit)::value;
              uint32_t send[32][2];
              for (int lane = 0; lane < 32; ++lane) quad_send<B>(wq[lane], (lane & 3) & B, send[lane]);
              for (int lane = 0; lane < 32; ++lane) quad_recv<B>(wq[lane], (lane & 3) & B, send[lane ^ B]);
            };
            round(std::integral_constant<int, 2>{});
            round(std::integral_constant<int, 1>{});
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane >> 2;
              uint16_t d[2];
              std::memcpy(d, rec0 + 16 * g + 4 * (u & 3), 4);
              for (int j = 0; j < 4; ++j) {
                regs[lane][0][j] = wq[lane][j] & 0xFFFF, regs[lane][1][j] = wq[lane][j] >> 16;
              }
              for (int hr = 0; hr < 2; ++hr) sc[lane][hr][0] = sc[lane][hr][1] = f16_bits(d[hr]);
            }
          } else {
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane >> 2;
              uint32_t v[4];
              std::memcpy(v, tile + 16 * lane, 16);
              const uint8_t* sb = rec0 + 16 * g + 4 * (2 * (gstep & 1) + gi);
              for (int js = 0; js < 2; ++js) {
                uint32_t a[4];
                tc_unpack(v[2 * gi + js], a);
                regs[lane][0][2 * js] = a[0], regs[lane][1][2 * js] = a[1];
                regs[lane][0][2 * js + 1] = a[2], regs[lane][1][2 * js + 1] = a[3];
                // 0.5·e4m3(byte) as the kernel's cvt gives it: twice ue4m3_half of the cleared byte.
                sc[lane][0][js] = 0.5f * (2.0f * ue4m3_half(sb[2 * js]));
                sc[lane][1][js] = 0.5f * (2.0f * ue4m3_half(sb[2 * js + 1]));
              }
            }
          }
          for (int lane = 0; lane < 32; ++lane)
            for (int hr = 0; hr < 2; ++hr)
              for (int j = 0; j < 4; ++j)
                for (int h = 0; h < 2; ++h) {
                  const int g = lane >> 2, q = lane & 3;
                  const int64_t row = 16 * t + g + 8 * hr;
                  const int e = element_of(q, j, h);
                  const int64_t kk = 32 * u + e;
                  float value;  // the integer the kernel feeds the mma, times the scale it folds with
                  if (tt == TcType::Q8_0) {
                    value = float(int((regs[lane][hr][j] >> (8 * h)) & 0xFF) - 128) * sc[lane][hr][0];
                  } else {
                    const float code = f16_bits((regs[lane][hr][j] >> (16 * h)) & 0xFFFF) * 32768.0f;  // × 2^15
                    value = code * sc[lane][hr][j >> 1];
                    if (code != std::floor(code)) ++bad;  // 2·E2M1: an integer
                  }
                  const float want = row < m ? w[size_t(row * k + kk)] : 0.0f;
                  if (e < 0 || value != want) ++bad;
                  ++checked;
                }
        }
      }
    EXPECT_EQ(bad, 0) << type;
    EXPECT_EQ(checked, s.tiles * (k / 32) * 32 * 16) << type;
  }
}

TEST(GemvTcRepack, RejectsRowsThatAreNotWholeBlocks) {
  const std::vector<uint8_t> bytes(36 * 4, 0);
  EXPECT_THROW(kcuda::repack_nvfp4_tc(bytes.data(), 1, 96, "blk.0.ssm_in.weight"), Error);
  EXPECT_THROW(kcuda::repack_q8_0_tc(bytes.data(), 1, 48, "blk.0.attn_q.weight"), Error);
}

}  // namespace
}  // namespace tandem::gguf::test
