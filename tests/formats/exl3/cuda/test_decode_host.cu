// The CUDA trellis decode (formats/exl3/decode_cuda.cuh) run on the host, its few intrinsics
// emulated, against trellis.h: every state's value for the three codebooks, and every lane's eight
// states straight from the packed words for every K, on random tiles. No GPU needed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

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
