// The CUDA decoders (formats/gguf/kquants_cuda.cuh, iquants_cuda.cuh) run on the host, their few
// intrinsics emulated, against the CPU kernels: every value that dequantize and get_rows write, bit
// for bit, for every block type with CUDA kernels, on fresh random valid blocks. Also the tensor-core
// fragments of the host-callable Mma decoders (mma_cuda.cuh: every type but IQ2_XXS, NVFP4 and Q8_0,
// whose decoders use device-only loads and are checked on the GPU): each of a group's 32 elements at
// exactly one (lane, slot), its fp16 value exact, and value · scale (− min) the CPU's weight bit for
// bit; and the 16-entry code lookup NVFP4 and IQ4 share. No GPU needed.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "formats/gguf/iquants_cuda.cuh"
#include "formats/gguf/kquants_cuda.cuh"
#include "formats/gguf/mma_cuda.cuh"
#include "gguf_cuda_test_util.h"

namespace tandem::gguf::test {
namespace {

namespace grids {
#include "formats/gguf/iq_tables.inc"
}

template <class Q>
void expect_decoder_matches_cpu(const char* type, const void* grid) {
  using namespace kcuda;
  std::vector<unsigned char> tables(size_t(table_bytes<Q>()) + 16);
  const Tables t = fill_tables<Q>(tables.data(), grid, 0, 1);
  const QuantType& qt = *find_type(type);
  uint64_t seed = 31;
  for (int64_t k : {int64_t(Q::kElems) * 3, int64_t(1024 + 5 * Q::kElems)}) {
    const int64_t rows = 7;
    std::vector<uint8_t> bytes = random_weight(type, rows, k, seed++);
    bytes.resize(bytes.size() + 64, 0);  // the slack device buffers keep
    const int64_t rb = row_bytes(qt, k);
    std::vector<float> want(size_t(rows * k)), got(size_t(rows * k), NAN);
    for (int64_t r = 0; r < rows; ++r) qt.dequantize(bytes.data() + r * rb, want.data() + r * k, k);
    constexpr int UPB = Q::kElems / 32;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < k / 32; ++u) {
        const typename Q::Unit un = Q::load(bytes.data() + r * rb + (u / UPB) * Q::kBytes, int(u % UPB));
        rows_half<Q, 0>(un, t, 1.0f, got.data() + r * k + u * 32);
        rows_half<Q, 1>(un, t, 1.0f, got.data() + r * k + u * 32);
      }
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&want[i], &got[i], 4) != 0 && bad++ < 5)
        ADD_FAILURE() << type << " k " << k << " element " << i << ": cpu " << want[i] << ", cuda decoder " << got[i];
    EXPECT_EQ(bad, 0u) << type << " k " << k;
  }
}

TEST(GgufCudaDecoders, EqualTheCpuKernelsBitForBit) {
  using namespace kcuda;
  expect_decoder_matches_cpu<DecQ8_0>("Q8_0", nullptr);
  expect_decoder_matches_cpu<DecQ4_K>("Q4_K", nullptr);
  expect_decoder_matches_cpu<DecQ5_K>("Q5_K", nullptr);
  expect_decoder_matches_cpu<DecQ6_K>("Q6_K", nullptr);
  expect_decoder_matches_cpu<DecIQ4_NL>("IQ4_NL", nullptr);
  expect_decoder_matches_cpu<DecIQ4_XS>("IQ4_XS", nullptr);
  expect_decoder_matches_cpu<DecNVFP4>("NVFP4", nullptr);
  expect_decoder_matches_cpu<DecIQ2_XXS>("IQ2_XXS", grids::iq2xxs_grid);
  expect_decoder_matches_cpu<DecIQ2_XS>("IQ2_XS", grids::iq2xs_grid);
  expect_decoder_matches_cpu<DecIQ2_S>("IQ2_S", grids::iq2s_grid);
  expect_decoder_matches_cpu<DecIQ3_XXS>("IQ3_XXS", grids::iq3xxs_grid);
  expect_decoder_matches_cpu<DecIQ3_S>("IQ3_S", grids::iq3s_grid);
  expect_decoder_matches_cpu<DecIQ1_M>("IQ1_M", grids::iq1s_grid);
}

// Mma<Q>::group on the host for every lane of every group: the slots cover the 32 elements once,
// k-step j's slots (4j … 4j + 3) take one scale, and fp16(q) · scale (fmaf with −min where the type
// has one) is the CPU's weight bit for bit, with the fp16 value equal to the decoder's q.
template <class Q>
void expect_mma_fragments_match_cpu(const char* type, const void* grid) {
  using namespace kcuda;
  using M = Mma<Q>;
  std::vector<unsigned char> tables(size_t(table_bytes<Q>()) + 16);
  const Tables t = fill_tables<Q>(tables.data(), grid, 0, 1);
  const QuantType& qt = *find_type(type);
  uint64_t seed = 57;
  const int64_t rows = 5, k = int64_t(Q::kElems) * (Q::kElems == 32 ? 24 : 3);
  std::vector<uint8_t> bytes = random_weight(type, rows, k, seed);
  bytes.resize(bytes.size() + 64, 0);
  const int64_t rb = row_bytes(qt, k);
  std::vector<float> want(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) qt.dequantize(bytes.data() + r * rb, want.data() + r * k, k);
  // place: a bijection of the 32 elements onto (lane class, slot).
  int seen[4][8] = {};
  for (int e = 0; e < 32; ++e) {
    int q = -1, slot = -1;
    M::place(e, q, slot);
    ASSERT_TRUE(q >= 0 && q < 4 && slot >= 0 && slot < 8) << type << " element " << e;
    ++seen[q][slot];
  }
  for (auto& row : seen)
    for (int c : row) ASSERT_EQ(c, 1) << type << ": place is not a bijection";
  size_t bad = 0, nonzero = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int u = 0; u < int(k / 32); ++u)
      for (int lane_q = 0; lane_q < 4; ++lane_q) {
        uint32_t w[4];
        float sc[2], mn[2] = {0.0f, 0.0f};
        if constexpr (M::kHasMin) M::group(bytes.data() + r * rb, u, lane_q, t, w, sc, mn);
        else M::group(bytes.data() + r * rb, u, lane_q, t, w, sc);
        for (int e = 0; e < 32; ++e) {
          int q, slot;
          M::place(e, q, slot);
          if (q != lane_q) continue;
          const float h = f16_bits((w[slot >> 1] >> (16 * (slot & 1))) & 0xFFFF);
          const int j = M::kScalePerStep ? slot >> 2 : 0;
          const float got = M::kHasMin ? std::fmaf(sc[j], h, -mn[j]) : h * sc[j];
          const float ref = want[size_t(r * k + u * 32 + e)];
          nonzero += ref != 0.0f;
          if (std::memcmp(&got, &ref, 4) != 0 && bad++ < 5)
            ADD_FAILURE() << type << " row " << r << " group " << u << " element " << e << ": cpu " << ref
                          << ", fragment " << got << " (q " << h << ", scale " << sc[j] << ")";
        }
      }
  EXPECT_EQ(bad, 0u) << type;
  EXPECT_GT(nonzero, size_t(rows * k / 2)) << type;
}

// lut16_biased, which NVFP4's and IQ4's lane-wise decoders share: every code in every byte position,
// against the tables written out (2·E2M1 and kvalues_iq4nl).
TEST(GgufCudaMmaDecoders, SixteenEntryLookupGivesEachCodesValue) {
  using namespace kcuda;
  const int fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int code = 0; code < 16; ++code)
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t v = uint32_t(code) << (4 * pos) | uint32_t((code + 5) & 15) << (4 * ((pos + 1) & 3));
      const uint32_t a = lut16_biased(v, 0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
      const uint32_t b = lut16_biased(v, 0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
      EXPECT_EQ(int(int8_t(uint8_t(((a >> (8 * pos)) & 0xFF) ^ 0x80))), fp4[code]) << "code " << code << " pos " << pos;
      EXPECT_EQ(int(int8_t(uint8_t(((b >> (8 * pos)) & 0xFF) ^ 0x80))), iq4[code]) << "code " << code << " pos " << pos;
    }
}

TEST(GgufCudaMmaDecoders, FragmentsEqualTheCpuWeightsBitForBit) {
  using namespace kcuda;
  expect_mma_fragments_match_cpu<DecQ4_K>("Q4_K", nullptr);
  expect_mma_fragments_match_cpu<DecQ5_K>("Q5_K", nullptr);
  expect_mma_fragments_match_cpu<DecQ6_K>("Q6_K", nullptr);
  expect_mma_fragments_match_cpu<DecIQ4_NL>("IQ4_NL", nullptr);
  expect_mma_fragments_match_cpu<DecIQ4_XS>("IQ4_XS", nullptr);
  expect_mma_fragments_match_cpu<DecIQ2_XS>("IQ2_XS", grids::iq2xs_grid);
  expect_mma_fragments_match_cpu<DecIQ2_S>("IQ2_S", grids::iq2s_grid);
  expect_mma_fragments_match_cpu<DecIQ3_XXS>("IQ3_XXS", grids::iq3xxs_grid);
  expect_mma_fragments_match_cpu<DecIQ3_S>("IQ3_S", grids::iq3s_grid);
  expect_mma_fragments_match_cpu<DecIQ1_M>("IQ1_M", grids::iq1s_grid);
}

}  // namespace
}  // namespace tandem::gguf::test
