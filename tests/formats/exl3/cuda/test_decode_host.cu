// The CUDA trellis decode (formats/exl3/decode_cuda.cuh) run on the host, its few intrinsics
// emulated, against trellis.h: every state's value for the three codebooks, and every lane's eight
// states straight from the packed words for every K, on random tiles. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "exl3_reference.h"
#include "formats/exl3/decode_cuda.cuh"
#include "formats/exl3/trellis.h"

namespace tandem::exl3 {
namespace {

template <int CB>
void expect_codebook(Codebook cb) {
  size_t bad = 0;
  for (uint32_t s = 0; s < 65536; ++s) {
    const uint16_t want = state_value_f16(s, cb), got = kcuda::state_f16<CB>(s);
    if (want != got && bad++ < 5) ADD_FAILURE() << codebook_name(cb) << " state " << s << ": cpu " << want << ", cuda " << got;
    // The pair decoder gives each half the same bits.
    const uint32_t pair = kcuda::state_pair_f16<CB>(s, s ^ 0x5A5Au);
    if ((pair & 0xFFFF) != want || (pair >> 16) != state_value_f16(s ^ 0x5A5Au, cb)) {
      if (bad++ < 5) ADD_FAILURE() << codebook_name(cb) << " pair at state " << s;
    }
  }
  EXPECT_EQ(bad, 0u) << codebook_name(cb);
}

TEST(Exl3CudaDecode, CodebooksEqualTheCpuForEveryState) {
  expect_codebook<kcuda::kCb3Inst>(Codebook::k3Inst);
  expect_codebook<kcuda::kCbMcg>(Codebook::kMcg);
  expect_codebook<kcuda::kCbMul1>(Codebook::kMul1);
}

template <int K>
void expect_lane_states(std::mt19937_64& g) {
  for (int rep = 0; rep < 64; ++rep) {
    std::vector<uint16_t> words(size_t(16 * K));
    for (auto& w : words) w = uint16_t(g());
    if (rep == 0) std::fill(words.begin(), words.end(), uint16_t(0xFFFF));
    uint16_t want[256];
    tile_states(words.data(), K, want);
    // The kernels read the tile as little-endian u32 words.
    std::vector<uint32_t> u(size_t(8 * K));
    for (int i = 0; i < 8 * K; ++i) u[size_t(i)] = uint32_t(words[size_t(2 * i)]) | uint32_t(words[size_t(2 * i + 1)]) << 16;
    for (int lane = 0; lane < 32; ++lane) {
      const kcuda::LaneWords lw = kcuda::lane_words<K>(lane);
      uint32_t s[8], s3[8];
      kcuda::lane_states<K>(u[size_t(lw.w0)], u[size_t(lw.w1)], u[size_t(lw.w2)], lw.off, s);
      // As the kernels read them: the third word only where some lane needs it.
      kcuda::tile_lane_states<K>(u.data(), lw, lw.off, s3);
      for (int q = 0; q < 8; ++q) {
        ASSERT_EQ(s[q], want[8 * lane + q]) << "K " << K << " lane " << lane << " state " << q << " rep " << rep;
        ASSERT_EQ(s3[q], want[8 * lane + q]) << "K " << K << " lane " << lane << " state " << q << " rep " << rep;
      }
    }
  }
}

TEST(Exl3CudaDecode, LaneStatesEqualTileStatesForEveryK) {
  // Which K read a third word per tile (lane_needs_word2): only K ≥ 5.
  EXPECT_FALSE(kcuda::lane_needs_word2<1>() || kcuda::lane_needs_word2<2>() || kcuda::lane_needs_word2<3>() ||
               kcuda::lane_needs_word2<4>());
  EXPECT_TRUE(kcuda::lane_needs_word2<5>() && kcuda::lane_needs_word2<6>() && kcuda::lane_needs_word2<7>() &&
              kcuda::lane_needs_word2<8>());
  std::mt19937_64 g(42);
  expect_lane_states<1>(g);
  expect_lane_states<2>(g);
  expect_lane_states<3>(g);
  expect_lane_states<4>(g);
  expect_lane_states<5>(g);
  expect_lane_states<6>(g);
  expect_lane_states<7>(g);
  expect_lane_states<8>(g);
}

// The kernels' decode (lane states straight from the packed words, then the codebook) on exllamav3's
// own tiles (tests/fixtures/exl3/) gives exllamav3's decoded trellis ref.w_hat_fp16, bit for bit.
template <int K, int CB>
void expect_exllama_w_hat(const char* name) {
  auto r = exl3_test::load_reference(name);
  ASSERT_TRUE(r) << "fixture missing";
  const Layout l = parse_group(r->group());
  ASSERT_EQ(l.K, K) << name;
  ASSERT_EQ(int(l.codebook), CB) << name;
  const std::vector<uint16_t> want = r->half_bits("ref.w_hat_fp16");
  size_t bad = 0;
  for (int64_t i = 0; i < l.k / kTile; ++i)
    for (int64_t j = 0; j < l.n / kTile; ++j) {
      std::vector<uint16_t> words(l.tile(i, j), l.tile(i, j) + 16 * K);  // a copy: exllamav3 leaves it unaligned
      std::vector<uint32_t> u(size_t(8 * K));
      for (int w = 0; w < 8 * K; ++w) u[size_t(w)] = uint32_t(words[size_t(2 * w)]) | uint32_t(words[size_t(2 * w + 1)]) << 16;
      for (int lane = 0; lane < 32; ++lane) {
        const kcuda::LaneWords lw = kcuda::lane_words<K>(lane);
        uint32_t s[8];
        kcuda::tile_lane_states<K>(u.data(), lw, lw.off, s);
        for (int q = 0; q < 8; ++q) {
          const int e = tile_perm(8 * lane + q);
          bad += kcuda::state_f16<CB>(s[q]) != want[size_t((i * 16 + e / 16) * l.n + j * 16 + e % 16)];
        }
      }
    }
  EXPECT_EQ(bad, 0u) << name << ": values that differ from exllamav3's w_hat";
  std::printf("%s: the CUDA decode gives %zu of %zu of exllamav3's values bit for bit\n", name, want.size() - bad,
              want.size());
}

TEST(Exl3CudaDecode, ExllamaTilesDecodeToExllamaValues) {
  expect_exllama_w_hat<2, kcuda::kCbMul1>("s256x256_k2_mul1_hidentity");
  expect_exllama_w_hat<4, kcuda::kCb3Inst>("s256x256_k4_3inst_hidentity");
  expect_exllama_w_hat<6, kcuda::kCbMcg>("s256x256_k6_mcg_hidentity");
}

// The int8 GEMV's premise: mul1's value is its byte sum's affine map kMul1Scale·bs + kMul1Bias (exact in
// float) rounded once to fp16, so leaving the rounding out moves each weight by at most half an ulp.
TEST(Exl3CudaDecode, Mul1IsTheAffineMapOfItsByteSumRoundedOnce) {
  size_t bad = 0;
  for (uint32_t s = 0; s < 65536; ++s) {
    const uint32_t bs = kcuda::byte_sum(s * kMul1Marker, 0);
    const double u = double(kcuda::kMul1Scale) * bs + double(kcuda::kMul1Bias);
    const float uf = float(u);
    const uint16_t want = state_value_f16(s, Codebook::kMul1);
    const uint16_t got = __half_raw(__float2half_rn(uf)).x;
    const double v = double(kcuda::half_bits_to_float(want));
    if ((double(uf) != u || got != want || std::abs(v - u) > std::ldexp(std::abs(v), -11)) && bad++ < 5)
      ADD_FAILURE() << "state " << s << ": bs " << bs << ", affine " << u << ", fp16 " << v;
  }
  EXPECT_EQ(bad, 0u);
}

// The int8 GEMV's activations: per group a power-of-two scale putting the largest magnitude in
// [64, 128), then each value as q1 + q2/128 (both in [−127, 127]) within 2^−8 of the scale (2^−7
// where q1 clamps), for groups from tiny to huge magnitudes.
TEST(Exl3CudaDecode, Int8LimbsHoldEachActivationWithinTwoToTheMinusEightOfItsScale) {
  std::mt19937_64 g(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const float mag : {0.0f, 1e-41f, 1e-30f, 3e-3f, 1.0f, 127.5f, 1e3f, 3e37f}) {
    for (int rep = 0; rep < 16; ++rep) {
      float a[128], mx = 0;
      for (float& x : a) x = u(g) * mag, mx = std::max(mx, std::abs(x));
      if (rep == 0 && mag > 0) a[5] = mag, a[9] = -mag, mx = mag;  // the extremes themselves
      const cuda::Pow2Scale sc = kcuda::i8_scale(mx);
      ASSERT_EQ(double(sc.up) * double(sc.down), 1.0) << mag;
      if (mx >= 1e-37f && mx <= 1e37f) {
        EXPECT_GE(double(mx) * sc.up, 64.0) << mag;
        EXPECT_LT(double(mx) * sc.up, 128.0) << mag;
      }
      for (const float x : a) {
        int q1, q2;
        kcuda::split_i8(x * sc.up, q1, q2);
        ASSERT_TRUE(q1 >= -127 && q1 <= 127 && q2 >= -127 && q2 <= 127) << x;
        const double err = std::abs(double(x) - double(sc.down) * (q1 + q2 / 128.0));
        const double bound = double(sc.down) * (std::abs(double(x) * sc.up) > 127.5 ? 1.0 / 128 : 1.0 / 256);
        ASSERT_LE(err, bound * (1 + 1e-6)) << "value " << x << " of a group of magnitude " << mag;
      }
    }
  }
}

// The fp16 form's group scale (pow2_scale<14>, the same code as the int8 limbs' pow2_scale<6>): the
// largest magnitude lands in [2^14, 2^15) for every normal group, up and down are exact inverses, and
// neither overflows for an all-zero, denormal or huge group.
TEST(Exl3CudaDecode, Fp16GroupScalePutsTheLargestMagnitudeInTwoToTheFourteenToFifteen) {
  for (const float mx : {0.0f, 1e-41f, 1e-30f, 3e-3f, 1.0f, 16384.0f, 32767.0f, 1e30f, 3e38f}) {
    const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
    ASSERT_EQ(double(sc.up) * double(sc.down), 1.0) << mx;
    ASSERT_TRUE(std::isfinite(sc.up) && std::isfinite(sc.down) && sc.up > 0 && sc.down > 0) << mx;
    if (mx >= 1e-30f && mx <= 1e30f) {
      EXPECT_GE(double(mx) * sc.up, 16384.0) << mx;
      EXPECT_LT(double(mx) * sc.up, 32768.0) << mx;
    }
  }
}

// The element order the decode kernel writes (stream position 8·lane + q → row, column) is the
// tile permutation of trellis.h.
TEST(Exl3CudaDecode, FragmentOrderIsTheTilePermutation) {
  for (int lane = 0; lane < 32; ++lane)
    for (int q = 0; q < 8; ++q) {
      const int r0 = (lane % 4) * 2, c = lane / 4 + (q >= 4 ? 8 : 0);
      const int r = r0 + (q % 4 == 0 ? 0 : q % 4 == 1 ? 1 : q % 4 == 2 ? 8 : 9);
      EXPECT_EQ(r * 16 + c, tile_perm(8 * lane + q)) << "lane " << lane << " q " << q;
    }
}

}  // namespace
}  // namespace tandem::exl3
