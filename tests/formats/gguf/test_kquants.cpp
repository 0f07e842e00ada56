// Tests formats/gguf/kquants_cpu.cpp and quant_types.cpp: every dense, k-quant, IQ4 and NVFP4 type
// against an independent float64 decoder written element by element from spec/formats.md § 3.1–3.7
// and § 3.14, the dot products against float64 sums, and the type registry against § 2.4.
//
// Exactness: for the blocks generated here every spec formula is exact in float64 (at most 25
// significant bits per product, and Q4_K/Q5_K's difference spans < 53 bits because d and dmin are
// within a factor 100), so the kernels must return that value rounded once to fp32, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "act_reference.h"
#include "formats/gguf/kernels_cpu.h"
#include "formats/gguf/quant.h"

namespace {

using namespace tandem::gguf;

// ---- float64 reference: the value of element e (from the block start) of one block.

int bit(uint32_t v, int i) { return (v >> i) & 1; }
uint32_t u16_at(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }

double fp16(uint32_t h) {  // finite IEEE binary16 from its fields
  const int exp = (h >> 10) & 31, man = h & 1023;
  const double mag = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return bit(h, 15) ? -mag : mag;
}
double bf16(uint32_t h) {  // finite bfloat16: the top half of an fp32
  const int exp = (h >> 7) & 255, man = h & 127;
  const double mag = exp == 0 ? std::ldexp(man, -133) : std::ldexp(128 + man, exp - 134);
  return bit(h, 15) ? -mag : mag;
}

const int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int kFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

double ref_q8_0(const uint8_t* b, int e) { return fp16(u16_at(b)) * int8_t(b[2 + e]); }

// § 3.3 get_scale_min_k4: scale and min of sub-block j.
void k4_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

double ref_q4_k(const uint8_t* b, int e) {
  const double d = fp16(u16_at(b)), dmin = fp16(u16_at(b + 2));
  const uint8_t* qs = b + 16;
  const int c = e / 64, hi = e % 64 / 32, l = e % 32;
  int sc, m;
  k4_scale_min(b + 4, 2 * c + hi, sc, m);
  const int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
  return d * sc * q - dmin * m;
}

double ref_q5_k(const uint8_t* b, int e) {
  const double d = fp16(u16_at(b)), dmin = fp16(u16_at(b + 2));
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  const int c = e / 64, hi = e % 64 / 32, l = e % 32;
  int sc, m;
  k4_scale_min(b + 4, 2 * c + hi, sc, m);
  const int q = (hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF) + 16 * bit(qh[l], 2 * c + hi);
  return d * sc * q - dmin * m;
}

double ref_q6_k(const uint8_t* b, int e) {
  const int n = e / 128, r = e % 128, quarter = r / 32, l = r % 32, is = l / 16;
  const uint8_t* ql = b + 64 * n;
  const uint8_t* qh = b + 128 + 32 * n;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
  const double d = fp16(u16_at(b + 208));
  int q = 0;
  switch (quarter) {
    case 0: q = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32; break;
    case 1: q = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32; break;
    case 2: q = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32; break;
    case 3: q = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32; break;
  }
  return d * sc[is + 2 * quarter] * q;
}

double ref_iq4_nl(const uint8_t* b, int e) {
  const uint8_t* qs = b + 2;
  const int j = e % 16;
  return fp16(u16_at(b)) * kIq4nl[e < 16 ? qs[j] & 0xF : qs[j] >> 4];
}

double ref_iq4_xs(const uint8_t* b, int e) {
  const uint32_t scales_h = u16_at(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  const int ib = e / 32, j = e % 16;
  const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
  const double dl = fp16(u16_at(b)) * (ls - 32);
  const int q = qs[16 * ib + j];
  return dl * kIq4nl[e % 32 < 16 ? q & 0xF : q >> 4];
}

double ue4m3_half(int x) {
  if (x == 0x00 || x == 0x7F) return 0.0;
  const int e = (x >> 3) & 0xF, m = x & 7;
  return 0.5 * (e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
}

double ref_nvfp4(const uint8_t* b, int e) {
  const int s = e / 16, r = e % 16;
  const int q = b[4 + 8 * s + r % 8];
  return kFp4[r < 8 ? q & 0xF : q >> 4] * ue4m3_half(b[s]);
}

double ref_f32(const uint8_t* b, int e) {
  float v;
  std::memcpy(&v, b + 4 * e, 4);
  return v;
}
double ref_f16(const uint8_t* b, int e) { return fp16(u16_at(b + 2 * e)); }
double ref_bf16(const uint8_t* b, int e) { return bf16(u16_at(b + 2 * e)); }

// ---- random valid blocks

struct Case {
  const char* name;
  int id, elems, bytes;
  double (*ref)(const uint8_t*, int);  // element e of the block at b (dense types: b is the row)
  void (*fill)(uint8_t* b, std::mt19937_64& g);
};

// A positive finite fp16 in about [1e-3, 1e-1]: exponent field 5..11 (2^-10 .. 2^-4·1.999).
uint16_t moderate_half(std::mt19937_64& g) { return uint16_t((5 + g() % 7) << 10 | (g() & 1023)); }
void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
template <int kOffset>
void fill_d(uint8_t* b, std::mt19937_64& g) {
  put_u16(b + kOffset, moderate_half(g));
}
void fill_d_dmin(uint8_t* b, std::mt19937_64& g) {
  put_u16(b, moderate_half(g));
  put_u16(b + 2, moderate_half(g));
}
void fill_nvfp4(uint8_t* b, std::mt19937_64& g) {
  for (int s = 0; s < 4; ++s) {  // any byte but the NaN code, with either top bit (llama.cpp ignores it)
    uint8_t x;
    do x = uint8_t(g());
    while ((x & 0x7F) == 0x7F);
    b[s] = x;
  }
}
void fill_f32(uint8_t* b, std::mt19937_64& g) {
  float v = std::ldexp(float(int32_t(g() % 2000001) - 1000000), int(g() % 40) - 50);
  std::memcpy(b, &v, 4);
}
void fill_f16(uint8_t* b, std::mt19937_64&) {  // random bytes; only inf/NaN are redrawn
  if (((u16_at(b) >> 10) & 31) == 31) b[1] &= 0x83;
}
// Exponents within 2^±40 keep a row's dot product finite; one element in 16 is subnormal.
void fill_bf16(uint8_t* b, std::mt19937_64& g) {
  const uint32_t exp = g() % 16 == 0 ? 0 : 87 + g() % 81;
  put_u16(b, uint16_t((u16_at(b) & 0x807F) | exp << 7));
}

const Case kCases[] = {
    {"F32", 0, 1, 4, ref_f32, fill_f32},
    {"F16", 1, 1, 2, ref_f16, fill_f16},
    {"BF16", 30, 1, 2, ref_bf16, fill_bf16},
    {"Q8_0", 8, 32, 34, ref_q8_0, fill_d<0>},
    {"Q4_K", 12, 256, 144, ref_q4_k, fill_d_dmin},
    {"Q5_K", 13, 256, 176, ref_q5_k, fill_d_dmin},
    {"Q6_K", 14, 256, 210, ref_q6_k, fill_d<208>},
    {"IQ4_NL", 20, 32, 18, ref_iq4_nl, fill_d<0>},
    {"IQ4_XS", 23, 256, 136, ref_iq4_xs, fill_d<0>},
    {"NVFP4", 40, 64, 36, ref_nvfp4, fill_nvfp4},
};

// Elements per test row: several blocks, and for dense types a length that leaves a lane tail.
int64_t row_elems(const Case& c) { return c.elems == 1 ? 1000 + 37 : 5 * c.elems; }

std::vector<uint8_t> random_row(const Case& c, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> row(size_t(n / c.elems * c.bytes));
  for (auto& v : row) v = uint8_t(g());
  for (int64_t i = 0; i < n / c.elems; ++i) c.fill(row.data() + i * c.bytes, g);
  return row;
}

double ref_elem(const Case& c, const std::vector<uint8_t>& row, int64_t e) {
  return c.elems == 1 ? c.ref(row.data(), int(e)) : c.ref(row.data() + e / c.elems * c.bytes, int(e % c.elems));
}

std::vector<float> random_x(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = u(g);
  return x;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// First-order bound of fp32 lane summation relative to Σ|w·x|: one rounding per product, n/32
// additions per lane, log2(32) reduction levels (kernels_cpu.h). About 3e-6 for the rows here.
double dot_tolerance(int64_t n) { return double(n / kDotLanes + 1 + 5 + 1) * 0x1p-24; }

class Kquant : public ::testing::TestWithParam<Case> {};

TEST_P(Kquant, RegistryMatchesSpecTable) {
  const Case& c = GetParam();
  const QuantType* t = find_type(c.id);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, c.name);
  EXPECT_EQ(t->block_elems, c.elems);
  EXPECT_EQ(t->block_bytes, c.bytes);
  EXPECT_EQ(find_type(std::string(c.name)), t);
  EXPECT_EQ(ggml_type_name(c.id), c.name);
}

TEST_P(Kquant, DequantizeEqualsSpecDecoderRoundedOnce) {
  const Case& c = GetParam();
  const QuantType& t = *find_type(c.id);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = row_elems(c);
    const auto row = random_row(c, n, seed);
    std::vector<float> out(static_cast<size_t>(n), -1234.5f);
    t.dequantize(row.data(), out.data(), n);
    for (int64_t e = 0; e < n; ++e) {
      const float want = float(ref_elem(c, row, e));
      ASSERT_EQ(bits_of(out[e]), bits_of(want))
          << c.name << " seed " << seed << " element " << e << ": got " << out[e] << ", spec gives " << want;
    }
  }
}

TEST_P(Kquant, DotMatchesFloat64Sum) {
  const Case& c = GetParam();
  const QuantType& t = *find_type(c.id);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = row_elems(c);
    const auto row = random_row(c, n, seed);
    const auto x = random_x(n, seed + 1000);
    std::vector<float> w(static_cast<size_t>(n));
    t.dequantize(row.data(), w.data(), n);
    double sum = 0, abs_sum = 0;
    for (int64_t e = 0; e < n; ++e) {
      sum += double(w[e]) * x[e];
      abs_sum += std::abs(double(w[e]) * x[e]);
    }
    const float got = t.dot(row.data(), x.data(), n);
    EXPECT_NEAR(got, sum, dot_tolerance(n) * abs_sum) << c.name << " seed " << seed;
    // One block alone, and no blocks at all.
    const int64_t one = c.elems == 1 ? 7 : c.elems;
    double sum1 = 0;
    for (int64_t e = 0; e < one; ++e) sum1 += double(w[e]) * x[e];
    EXPECT_NEAR(t.dot(row.data(), x.data(), one), sum1, dot_tolerance(one) * abs_sum) << c.name << " seed " << seed;
    EXPECT_EQ(t.dot(row.data(), x.data(), 0), 0.0f);
  }
}

// kernels_cpu.h: dot multiplies exactly the dequantized weights, lane by lane in a fixed order, so
// it equals the F32 dot of the dequantized row, and moving the inputs changes no bit.
TEST_P(Kquant, DotIsDeterministicAndUsesTheDequantizedWeights) {
  const Case& c = GetParam();
  const QuantType& t = *find_type(c.id);
  const int64_t n = row_elems(c);
  const auto row = random_row(c, n, 77);
  const auto x = random_x(n, 78);
  const float first = t.dot(row.data(), x.data(), n);
  EXPECT_EQ(bits_of(t.dot(row.data(), x.data(), n)), bits_of(first));

  std::vector<uint8_t> row_moved(row.size() + 1);  // odd byte offset
  std::memcpy(row_moved.data() + 1, row.data(), row.size());
  std::vector<float> x_moved(x.size() + 3);
  std::memcpy(x_moved.data() + 3, x.data(), x.size() * 4);
  EXPECT_EQ(bits_of(t.dot(row_moved.data() + 1, x_moved.data() + 3, n)), bits_of(first));

  std::vector<float> w(static_cast<size_t>(n));
  t.dequantize(row.data(), w.data(), n);
  EXPECT_EQ(bits_of(dot_f32(reinterpret_cast<const uint8_t*>(w.data()), x.data(), n)), bits_of(first));
}

// dot_act (the llama.cpp-compatible product): the activations rounded to the type's vec_dot_type as
// llama.cpp rounds them (bit for bit), and the product equal to Σ w·x̂ in float64 (llama.cpp's integer
// sums and float scales, exactly) up to the kernel's fp32 roundings: about one per block scale product
// and accumulation step, or the lane sums' bound for F16/BF16/F32 rows.
TEST_P(Kquant, DotActMatchesLlamaRoundingAndFloat64Sum) {
  const Case& c = GetParam();
  const QuantType& t = *find_type(c.id);
  const ActFormat want = c.id == 0 ? ActFormat::F32 : c.id == 1 ? ActFormat::F16 : c.id == 30 ? ActFormat::BF16
                         : c.id == 8 || c.id == 20 || c.id == 40 ? ActFormat::Q8_0 : ActFormat::Q8_K;
  EXPECT_EQ(t.act, want) << c.name;
  for (const int64_t n : {int64_t(256), int64_t(1024)}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto row = random_row(c, n, seed);
      act_test::expect_dot_act_matches(t, row, n, act_test::random_activations(n, seed + 500),
                                       [&](int64_t e) { return ref_elem(c, row, e); },
                                       c.elems == 1 ? dot_tolerance(n) : 4e-6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Kquant, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// ---- hand-built blocks: the few layout facts a symmetric misreading could hide

TEST(KquantLayout, Nvfp4NibbleOrderAndScaleCodes) {
  uint8_t b[36] = {};
  b[0] = 0x38;  // e = 7, m = 0: UE4M3 1.0, halved 0.5
  b[1] = 0x00;  // 0 → 0
  b[2] = 0x7F;  // NaN code → 0
  b[3] = 0x01;  // subnormal: 2^-9, halved 2^-10
  b[4 + 0] = 0xF1;  // element 0: code 1 → 1; element 8: code 15 → −12
  b[4 + 7] = 0x57;  // element 7: code 7 → 12; element 15: code 5 → 6
  b[4 + 16] = 0x11;  // elements 32 and 40: code 1, but under the NaN scale code
  b[4 + 24] = 0x09;  // element 48: code 9 → −1
  float y[64];
  dequantize_nvfp4(b, y, 64);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[8], -6.0f);
  EXPECT_EQ(y[7], 6.0f);
  EXPECT_EQ(y[15], 3.0f);
  EXPECT_EQ(y[48], -0x1p-10f);
  for (int e = 16; e < 48; ++e) EXPECT_EQ(y[e], 0.0f) << "element " << e;
  // The top bit is not part of UE4M3: 0xB8 reads as 0x38, and 0xFF (unlike 0x7F) is a value,
  // (1 + 7/8)·2^8·½ = 240, as llama.cpp's ggml_ue4m3_to_fp32 decodes it.
  b[0] = 0xB8;
  b[2] = 0xFF;
  b[4 + 16] = 0x01;
  dequantize_nvfp4(b, y, 64);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[32], 240.0f);
}

TEST(KquantLayout, Q4kUpperSubBlocksTakeTheirHighBitsFromTheFirstEightScaleBytes) {
  uint8_t b[144] = {};
  put_u16(b, 0x3C00);      // d = 1
  put_u16(b + 2, 0x3C00);  // dmin = 1
  b[4 + 0] = 0xC0;         // sc_0 = 0, top bits → sc_4 high = 3
  b[4 + 4] = 0x80;         // m_0 = 0, top bits → m_4 high = 2
  b[4 + 8] = 0x5A;         // sc_4 low = 0xA, m_4 low = 5
  b[16 + 64] = 0x03;       // chunk 2, element 128: q = 3
  float y[256];
  dequantize_q4_k(b, y, 256);
  EXPECT_EQ(y[128], float((0x30 | 0xA) * 3 - (0x20 | 5)));
  EXPECT_EQ(y[0], 0.0f);
}

TEST(KquantLayout, DenseInfinitiesAndNansSurvive) {
  const uint16_t h[4] = {0x7C00, 0xFC00, 0x7E01, 0x0001};  // +inf, −inf, NaN, smallest subnormal
  float y[4];
  dequantize_f16(reinterpret_cast<const uint8_t*>(h), y, 4);
  EXPECT_EQ(y[0], INFINITY);
  EXPECT_EQ(y[1], -INFINITY);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 0x1p-24f);
  const uint16_t bh[3] = {0x7F80, 0xFF80, 0x7FC1};
  dequantize_bf16(reinterpret_cast<const uint8_t*>(bh), y, 3);
  EXPECT_EQ(y[0], INFINITY);
  EXPECT_EQ(y[1], -INFINITY);
  EXPECT_TRUE(std::isnan(y[2]));
}

// ---- registry

TEST(QuantTypes, EverySupportedIdIsFoundByIdAndName) {
  const int ids[] = {0, 1, 8, 12, 13, 14, 16, 17, 18, 20, 21, 22, 23, 29, 30, 40};
  for (int id : ids) {
    const QuantType* t = find_type(id);
    ASSERT_NE(t, nullptr) << "id " << id;
    EXPECT_EQ(t->id, id);
    EXPECT_EQ(find_type(std::string(t->name)), t);
    EXPECT_EQ(ggml_type_name(id), t->name);
    EXPECT_NE(t->dequantize, nullptr);
    EXPECT_NE(t->dot, nullptr);
    EXPECT_NE(t->dot_act, nullptr);
    EXPECT_EQ(row_bytes(*t, 4096), 4096 / t->block_elems * t->block_bytes);
  }
  EXPECT_EQ(find_type(std::string("q4_k")), find_type(12));  // a config may write it in lower case
  EXPECT_EQ(find_type(std::string("iq2_xxs")), find_type(16));
}

TEST(QuantTypes, UnsupportedIdsHaveNamesButNoKernels) {
  const std::pair<int, const char*> named[] = {
      {2, "Q4_0"},   {3, "Q4_1"},   {6, "Q5_0"},  {7, "Q5_1"},  {9, "Q8_1"},   {10, "Q2_K"},  {11, "Q3_K"},
      {15, "Q8_K"},  {19, "IQ1_S"}, {24, "I8"},   {25, "I16"},  {26, "I32"},   {27, "I64"},   {28, "F64"},
      {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"}, {41, "Q1_0"}, {42, "Q2_0"}, {31, "Q4_0_4_4"}};
  for (const auto& [id, name] : named) {
    EXPECT_EQ(find_type(id), nullptr) << name;
    EXPECT_EQ(ggml_type_name(id), name);
    EXPECT_EQ(find_type(std::string(name)), nullptr) << name;
  }
  EXPECT_EQ(ggml_type_name(43), "type 43");
  EXPECT_EQ(ggml_type_name(-1), "type -1");
  EXPECT_EQ(find_type(43), nullptr);
  EXPECT_EQ(find_type(-1), nullptr);
  EXPECT_EQ(find_type(std::string("Q4_K_M")), nullptr);  // a file type, not a block type
  EXPECT_EQ(find_type(std::string("")), nullptr);
}

}  // namespace
