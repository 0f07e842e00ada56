// Tests formats/gguf/iquants_cpu.cpp: every i-quant type against an independent float64 decoder written
// element by element from spec/formats.md § 3.8–3.13, plus the lookup tables against the properties
// § 3.8–3.15 states (a bad extraction by tools/gen_iq_tables.py shows up here first).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "act_reference.h"
#include "formats/gguf/kernels_cpu.h"
#include "formats/gguf/quant.h"

namespace tandem::gguf::iq_test_tables {
// The tables are data; the decoders below share them with the kernels but none of the kernel code.
#include "formats/gguf/iq_tables.inc"
}  // namespace tandem::gguf::iq_test_tables

namespace {

using namespace tandem::gguf;
using namespace tandem::gguf::iq_test_tables;

constexpr int kQK = 256;

// ---- float64 reference, one element e (0..255) of one block at a time.

int bit(uint32_t v, int i) { return (v >> i) & 1; }
uint32_t u16_at(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
uint32_t u32_at(const uint8_t* p) { return u16_at(p) | u16_at(p + 2) << 16; }

double fp16(uint32_t h) {  // finite IEEE binary16 from its fields (the tests never make inf/NaN)
  const int sign = bit(h, 15), exp = (h >> 10) & 31, man = h & 1023;
  const double mag = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return sign ? -mag : mag;
}
// Byte j of a little-endian grid word, whatever the host.
uint32_t byte_of(uint64_t word, int j) { return uint32_t(word >> (8 * j)) & 255; }
// sgn_j = −1 where bit j of the mask is set (§ 3 conventions).
double sgn(uint32_t mask, int j) { return mask & kmask_iq2xs[j] ? -1.0 : 1.0; }

double ref_iq2_xxs(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint32_t a0 = u32_at(blk + 2 + 8 * ib), a1 = u32_at(blk + 2 + 8 * ib + 4);
  const double db = fp16(u16_at(blk)) * (0.5 + (a1 >> 28)) * 0.25;
  const uint64_t g = iq2xxs_grid[byte_of(a0, l)];
  return db * byte_of(g, j) * sgn(ksigns_iq2xs[(a1 >> (7 * l)) & 127], j);
}

double ref_iq2_xs(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint32_t scale = blk[66 + ib];
  const double db = fp16(u16_at(blk)) * (0.5 + (l < 2 ? scale & 15 : scale >> 4)) * 0.25;
  const uint32_t q = u16_at(blk + 2 + 2 * (4 * ib + l));
  return db * byte_of(iq2xs_grid[q & 511], j) * sgn(ksigns_iq2xs[q >> 9], j);
}

double ref_iq2_s(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint8_t* qs = blk + 2;
  const uint8_t* qh = blk + 66;
  const uint32_t scale = blk[74 + ib];
  const double db = fp16(u16_at(blk)) * (0.5 + (l < 2 ? scale & 15 : scale >> 4)) * 0.25;
  const uint32_t idx = qs[4 * ib + l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 0x300);
  return db * byte_of(iq2s_grid[idx], j) * sgn(qs[32 + 4 * ib + l], j);
}

double ref_iq3_xxs(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint8_t* qs = blk + 2;
  const uint32_t a = u32_at(qs + 64 + 4 * ib);
  const double db = fp16(u16_at(blk)) * (0.5 + (a >> 28)) * 0.5;
  const uint32_t g = iq3xxs_grid[qs[8 * ib + 2 * l + j / 4]];  // g1 for j < 4, g2 after
  return db * byte_of(g, j % 4) * sgn(ksigns_iq2xs[(a >> (7 * l)) & 127], j);
}

double ref_iq3_s(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint8_t* qs = blk + 2;
  const uint8_t* qh = blk + 66;
  const uint8_t* signs = blk + 74;
  const uint8_t* scales = blk + 106;
  const double db = fp16(u16_at(blk)) * (1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 15));
  const uint32_t i1 = qs[8 * ib + 2 * l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 256);
  const uint32_t i2 = qs[8 * ib + 2 * l + 1] | ((uint32_t(qh[ib]) << (7 - 2 * l)) & 256);
  const uint32_t g = iq3s_grid[j < 4 ? i1 : i2];
  return db * byte_of(g, j % 4) * sgn(signs[4 * ib + l], j);
}

double ref_iq1_m(const uint8_t* blk, int e) {
  const int ib = e / 32, l = e % 32 / 8, j = e % 8;
  const uint8_t* q = blk + 4 * ib;
  const uint8_t* h = blk + 32 + 2 * ib;
  uint32_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = u16_at(blk + 48 + 2 * i);
  const double d = fp16((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const double dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
  const double dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
  uint32_t idx, shift_bit;
  switch (l) {
    case 0: idx = q[0] | ((uint32_t(h[0]) << 8) & 0x700), shift_bit = h[0] & 0x08; break;
    case 1: idx = q[1] | ((uint32_t(h[0]) << 4) & 0x700), shift_bit = h[0] & 0x80; break;
    case 2: idx = q[2] | ((uint32_t(h[1]) << 8) & 0x700), shift_bit = h[1] & 0x08; break;
    default: idx = q[3] | ((uint32_t(h[1]) << 4) & 0x700), shift_bit = h[1] & 0x80; break;
  }
  const double delta = shift_bit ? -0.125 : 0.125;
  const double g = int8_t(byte_of(iq1s_grid[idx], j));
  return (l < 2 ? dl1 : dl2) * (g + delta);
}

// ---- the types under test

struct IqCase {
  int id;  // ggml type id (§ 2.4)
  const char* name;
  int block_bytes;
  void (*dequantize)(const uint8_t*, float*, int64_t);
  float (*dot)(const uint8_t*, const float*, int64_t);
  double (*ref)(const uint8_t*, int);
  // Writes fp16 bits h as the block's super-scale d.
  void (*set_d)(uint8_t*, uint16_t);
};

void set_d_front(uint8_t* blk, uint16_t h) {
  blk[0] = uint8_t(h & 255);
  blk[1] = uint8_t(h >> 8);
}
// IQ1_M spreads d over the top nibble of its four u16 scale words (§ 3.13).
void set_d_iq1_m(uint8_t* blk, uint16_t h) {
  for (int i = 0; i < 4; ++i) {
    uint8_t& hi = blk[48 + 2 * i + 1];
    hi = uint8_t((hi & 0x0F) | (((h >> (4 * i)) & 15) << 4));
  }
}

const IqCase kCases[] = {
    {16, "IQ2_XXS", 66, dequantize_iq2_xxs, dot_iq2_xxs, ref_iq2_xxs, set_d_front},
    {17, "IQ2_XS", 74, dequantize_iq2_xs, dot_iq2_xs, ref_iq2_xs, set_d_front},
    {22, "IQ2_S", 82, dequantize_iq2_s, dot_iq2_s, ref_iq2_s, set_d_front},
    {18, "IQ3_XXS", 98, dequantize_iq3_xxs, dot_iq3_xxs, ref_iq3_xxs, set_d_front},
    {21, "IQ3_S", 110, dequantize_iq3_s, dot_iq3_s, ref_iq3_s, set_d_front},
    {29, "IQ1_M", 56, dequantize_iq1_m, dot_iq1_m, ref_iq1_m, set_d_iq1_m},
};

// Random bytes with a finite fp16 d: sign random, exponent field in [min_exp, max_exp].
std::vector<uint8_t> random_blocks(const IqCase& c, int n_blocks, uint64_t seed, int min_exp = 8, int max_exp = 18) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(size_t(n_blocks) * c.block_bytes);
  for (auto& b : bytes) b = uint8_t(rng());
  std::uniform_int_distribution<int> exp(min_exp, max_exp);
  for (int i = 0; i < n_blocks; ++i) {
    const uint16_t h = uint16_t((rng() & 0x8000) | (exp(rng) << 10) | (rng() & 1023));
    c.set_d(bytes.data() + size_t(i) * c.block_bytes, h);
  }
  return bytes;
}

std::vector<double> reference(const IqCase& c, const std::vector<uint8_t>& bytes) {
  const int n_blocks = int(bytes.size() / c.block_bytes);
  std::vector<double> out(size_t(n_blocks) * kQK);
  for (int b = 0; b < n_blocks; ++b)
    for (int e = 0; e < kQK; ++e) out[size_t(b) * kQK + e] = c.ref(bytes.data() + size_t(b) * c.block_bytes, e);
  return out;
}

class IquantTest : public ::testing::TestWithParam<IqCase> {};

// Exact equality: each value is d (11 significant bits) × a scale factor (≤ 5 bits) × a grid value
// (≤ 6 bits, or a multiple of 1/8 below 2 for IQ1_M), ≤ 22 bits in all, so fp32 holds it exactly.
TEST_P(IquantTest, DequantizeMatchesFloat64Reference) {
  const IqCase& c = GetParam();
  for (auto [lo, hi] : {std::pair{8, 18}, std::pair{0, 0}, std::pair{1, 30}}) {  // moderate, subnormal, full range
    const int n_blocks = 12;
    const auto bytes = random_blocks(c, n_blocks, 1000 + c.block_bytes + lo, lo, hi);
    const auto want = reference(c, bytes);
    std::vector<float> got(want.size(), NAN);
    c.dequantize(bytes.data(), got.data(), int64_t(got.size()));
    for (size_t e = 0; e < want.size(); ++e)
      ASSERT_EQ(double(got[e]), want[e]) << c.name << " element " << e << " (exponents " << lo << ".." << hi << ")";
  }
}

// Every byte value in every position: a bit-field slip that random rows happen to miss shows up here.
TEST_P(IquantTest, DequantizeMatchesReferenceForEveryByteValue) {
  const IqCase& c = GetParam();
  auto base = random_blocks(c, 1, 77);
  std::vector<uint8_t> blocks;
  for (int pos = 0; pos < c.block_bytes; ++pos)
    for (int v = 0; v < 256; v += 5) {
      auto blk = base;
      blk[pos] = uint8_t(v);
      c.set_d(blk.data(), 0x2c00);  // keep d finite and moderate (0.0625) whatever byte we set
      blocks.insert(blocks.end(), blk.begin(), blk.end());
    }
  const auto want = reference(c, blocks);
  std::vector<float> got(want.size());
  c.dequantize(blocks.data(), got.data(), int64_t(got.size()));
  for (size_t e = 0; e < want.size(); ++e) ASSERT_EQ(double(got[e]), want[e]) << c.name << " element " << e;
}

// dot accumulates in fp32, in kernels_cpu.h's lane order. Its error is bounded by the depth of the
// longest sum (n/32 adds into a lane, 5 in the final tree, 1 product) times 2^-24 times Σ|w·x|.
TEST_P(IquantTest, DotMatchesFloat64DequantizeThenMultiply) {
  const IqCase& c = GetParam();
  for (int n_blocks : {1, 3, 16}) {
    const int64_t n = int64_t(n_blocks) * kQK;
    const auto bytes = random_blocks(c, n_blocks, 2000 + n_blocks);
    std::mt19937_64 rng(3000 + n_blocks);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(n);
    for (auto& v : x) v = u(rng);

    std::vector<float> w(n);
    c.dequantize(bytes.data(), w.data(), n);
    const auto w_ref = reference(c, bytes);
    double want = 0, magnitude = 0;
    for (int64_t e = 0; e < n; ++e) {
      want += double(w[e]) * x[e];
      magnitude += std::abs(w_ref[e] * x[e]);
    }
    const double bound = (double(n) / 32 + 6) * std::ldexp(1.0, -24) * magnitude;
    const float got = c.dot(bytes.data(), x.data(), n);
    EXPECT_LE(std::abs(double(got) - want), bound) << c.name << " with " << n_blocks << " blocks";
    EXPECT_GT(magnitude, 0) << c.name;
  }
}

// The same row and activations give the same bits, wherever the buffers sit in memory.
TEST_P(IquantTest, DotIsDeterministic) {
  const IqCase& c = GetParam();
  const int n_blocks = 8;
  const int64_t n = int64_t(n_blocks) * kQK;
  const auto bytes = random_blocks(c, n_blocks, 4000);
  std::vector<float> x(n);
  std::mt19937_64 rng(4001);
  std::normal_distribution<float> g;
  for (auto& v : x) v = g(rng);

  const float first = c.dot(bytes.data(), x.data(), n);
  std::vector<uint8_t> bytes_shifted(bytes.size() + 3);
  std::memcpy(bytes_shifted.data() + 3, bytes.data(), bytes.size());
  std::vector<float> x_shifted(n + 1);
  std::memcpy(x_shifted.data() + 1, x.data(), n * sizeof(float));
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(std::bit_cast<uint32_t>(c.dot(bytes.data(), x.data(), n)), std::bit_cast<uint32_t>(first)) << c.name;
    EXPECT_EQ(std::bit_cast<uint32_t>(c.dot(bytes_shifted.data() + 3, x_shifted.data() + 1, n)),
              std::bit_cast<uint32_t>(first))
        << c.name;
  }
}

// dot_act (the llama.cpp-compatible product): Q8_K activations rounded as llama.cpp rounds them, and
// the product equal to Σ w·x̂ in float64 (llama.cpp's integer sums and float scales, exactly) up to
// the kernel's few fp32 roundings per block. Every row mixes normal, tiny, zero and negative-max blocks.
TEST_P(IquantTest, DotActMatchesLlamaRoundingAndFloat64Sum) {
  const IqCase& c = GetParam();
  const QuantType& t = *find_type(c.id);
  EXPECT_EQ(t.act, ActFormat::Q8_K) << c.name;
  for (int n_blocks : {1, 4}) {
    const int64_t n = int64_t(n_blocks) * kQK;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto bytes = random_blocks(c, n_blocks, 5000 + seed);
      const auto w = reference(c, bytes);
      act_test::expect_dot_act_matches(t, bytes, n, act_test::random_activations(n, seed),
                                       [&](int64_t e) { return w[size_t(e)]; });
    }
  }
}

// The registry hands these kernels out under the spec's id, name and block geometry.
TEST_P(IquantTest, RegistryPointsAtTheseKernels) {
  const IqCase& c = GetParam();
  const QuantType* t = find_type(c.id);
  ASSERT_NE(t, nullptr) << c.name;
  EXPECT_STREQ(t->name, c.name);
  EXPECT_EQ(t->block_elems, kQK) << c.name;
  EXPECT_EQ(t->block_bytes, c.block_bytes) << c.name;
  EXPECT_EQ(t->dequantize, c.dequantize) << c.name;
  EXPECT_EQ(t->dot, c.dot) << c.name;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, IquantTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<IqCase>& info) { return std::string(info.param.name); });

// ---- the tables, against the properties the spec states

template <typename T, size_t N>
void expect_bytes_in(const T (&grid)[N], int bytes_per_entry, const std::set<int>& allowed, const char* name) {
  std::set<T> distinct;
  for (size_t i = 0; i < N; ++i) {
    for (int j = 0; j < bytes_per_entry; ++j)
      ASSERT_TRUE(allowed.count(int(byte_of(grid[i], j)))) << name << "[" << i << "] byte " << j;
    distinct.insert(grid[i]);
  }
  EXPECT_EQ(distinct.size(), N) << name << " has repeated entries";
}

TEST(IquantTables, SignMasksFollowTheParityRule) {
  for (int j = 0; j < 8; ++j) EXPECT_EQ(kmask_iq2xs[j], 1u << j);
  for (uint32_t i = 0; i < 128; ++i)
    EXPECT_EQ(ksigns_iq2xs[i], i | uint32_t(std::popcount(i) & 1) << 7) << "ksigns_iq2xs[" << i << "]";
}

TEST(IquantTables, GridsHoldOnlyTheirLevels) {
  expect_bytes_in(iq2xxs_grid, 8, {8, 25, 43}, "iq2xxs_grid");
  expect_bytes_in(iq2xs_grid, 8, {8, 25, 43}, "iq2xs_grid");
  expect_bytes_in(iq2s_grid, 8, {8, 25, 43}, "iq2s_grid");
  expect_bytes_in(iq3xxs_grid, 4, {4, 12, 20, 28, 36, 44, 52, 62}, "iq3xxs_grid");
  expect_bytes_in(iq3s_grid, 4, {1, 3, 5, 7, 9, 11, 13, 15}, "iq3s_grid");
  expect_bytes_in(iq1s_grid, 8, {0xFF, 0x00, 0x01}, "iq1s_grid");  // int8 −1, 0, +1
}

}  // namespace
