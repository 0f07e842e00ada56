// Dense CPU weights: matmul against a float64 reference, batch invariance, get_rows, dequantize,
// group probing and loading.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "formats/safetensors/dense_cpu.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_format.h"
#include "formats/safetensors/safetensors_writer.h"
#include "st_test_util.h"
#include "tandem/parallel.h"
#include "test_util.h"

namespace tandem::safetensors {
namespace {

using test::expect_error;
using test::DeviceOnlyBackend;
using test::TempDir;

WriteTensor make_typed(const std::string& dtype, const std::string& name, const std::vector<int64_t>& shape,
                       const std::vector<float>& v) {
  if (dtype == "BF16") return make_bf16(name, shape, v);
  if (dtype == "F16") return make_f16(name, shape, v);
  return make_f32(name, shape, v);
}

// A checkpoint holding one weight, and the weight loaded for the CPU.
struct Loaded {
  TempDir dir;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<QuantizedTensor> weight;
  const RawTensor* raw = nullptr;
};

std::unique_ptr<Loaded> load_one(const WriteTensor& t) {
  auto l = std::make_unique<Loaded>();
  write_file(l->dir.file("m.safetensors"), {t});
  l->ckpt = open_checkpoint(l->dir.path());
  l->raw = l->ckpt->find(t.name);
  TensorGroup g{t.name, {l->raw}};
  DeviceOnlyBackend cpu("cpu");
  l->weight = SafetensorsFormat().load(g, cpu);
  return l;
}

std::vector<float> run_matmul(const QuantizedTensor& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(size_t(n * w.rows()), NAN);
  w.matmul(Tensor::f32(const_cast<float*>(x.data()), n, w.cols()), Tensor::f32(y.data(), n, w.rows()));
  return y;
}

class DenseMatmul : public ::testing::TestWithParam<std::string> {};

TEST_P(DenseMatmul, MatchesFloat64Reference) {
  const std::string dtype = GetParam();
  // 133 inputs: eight full blocks of 16 lanes plus a tail of 5.
  const int64_t out = 37, in = 133;
  auto l = load_one(make_typed(dtype, "layer.w", {out, in}, tandem::test::random_vec(out * in, 1, -2.f, 2.f)));
  const QuantizedTensor& w = *l->weight;
  EXPECT_EQ(w.type_name(), dtype);
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{out, in}));
  EXPECT_EQ(w.bytes(), size_t(out * in) * (dtype == "F32" ? 4 : 2));

  std::vector<double> wref(out * in);
  const size_t elem = dtype == "F32" ? 4 : 2;
  for (int64_t i = 0; i < out * in; ++i) wref[i] = test::ref_value(dtype, l->raw->data + i * elem);

  for (int64_t n : {1, 2, 3, 4, 5, 17}) {
    auto x = tandem::test::random_vec(n * in, 100 + n, -1.f, 1.f);
    auto y = run_matmul(w, x, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < in; ++j) {
          ref += double(x[i * in + j]) * wref[o * in + j];
          mag += std::abs(double(x[i * in + j]) * wref[o * in + j]);
        }
        // fp32 accumulation over ≤ 13 sequential adds per lane: a few ulps of the magnitude sum.
        ASSERT_NEAR(y[i * out + o], ref, 2e-6 * mag + 1e-30) << dtype << " n=" << n << " row " << i << " out " << o;
      }
  }
}

TEST_P(DenseMatmul, RowsAreBitIdenticalForAnyBatchAndThreadCount) {
  const std::string dtype = GetParam();
  const int64_t out = 300, in = 1000;  // several chunks per thread
  auto l = load_one(make_typed(dtype, "w", {out, in}, tandem::test::random_vec(out * in, 2)));
  const int64_t n = 17;
  auto x = tandem::test::random_vec(n * in, 3);
  auto batched = run_matmul(*l->weight, x, n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> xi(x.begin() + i * in, x.begin() + (i + 1) * in);
    auto single = run_matmul(*l->weight, xi, 1);
    ASSERT_EQ(std::memcmp(single.data(), batched.data() + i * out, out * sizeof(float)), 0) << "row " << i;
  }
  set_thread_count(1);
  auto serial = run_matmul(*l->weight, x, n);
  set_thread_count(0);
  EXPECT_EQ(std::memcmp(serial.data(), batched.data(), batched.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, DenseMatmul, ::testing::Values("BF16", "F16", "F32"));

TEST(DenseTensor, GetRows) {
  const int64_t vocab = 10, dim = 24;
  auto values = tandem::test::random_vec(vocab * dim, 4);
  auto l = load_one(make_bf16("embed.weight", {vocab, dim}, values));
  std::vector<int32_t> ids = {3, 0, 9, 3};
  std::vector<float> out(ids.size() * dim, NAN);
  l->weight->get_rows(ids.data(), int(ids.size()), Tensor::f32(out.data(), int64_t(ids.size()), dim));
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < dim; ++j)
      ASSERT_EQ(out[i * dim + j], test::ref_value("BF16", l->raw->data + 2 * (ids[i] * dim + j))) << i << "," << j;

  std::vector<int32_t> bad = {1, 10};
  expect_error([&] { l->weight->get_rows(bad.data(), 2, Tensor::f32(out.data(), 2, dim)); },
               {"'embed.weight'", "id 10", "[0, 10)"});
  expect_error([&] { l->weight->get_rows(ids.data(), 2, Tensor::f32(out.data(), 2, dim - 1)); },
               {"'embed.weight'", "[2, 23]", "[2, 24]"});
}

TEST(DenseTensor, DequantizeShapes) {
  struct Case {
    std::string dtype;
    std::vector<int64_t> shape;
  };
  for (const Case& c : {Case{"F32", {7}}, Case{"BF16", {5, 6}}, Case{"F16", {2, 3, 4}}, Case{"F32", {}}}) {
    int64_t numel = 1;
    for (int64_t d : c.shape) numel *= d;
    auto l = load_one(make_typed(c.dtype, "t", c.shape, tandem::test::random_vec(numel, 5, -100.f, 100.f)));
    EXPECT_EQ(l->weight->shape(), c.shape);
    std::vector<float> out(numel, NAN);
    l->weight->dequantize(out.data());
    const size_t elem = c.dtype == "F32" ? 4 : 2;
    for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(out[i], test::ref_value(c.dtype, l->raw->data + i * elem)) << c.dtype;
  }
}

TEST(DenseTensor, F16EveryBitPattern) {
  std::vector<uint8_t> bytes(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    bytes[2 * h] = uint8_t(h);
    bytes[2 * h + 1] = uint8_t(h >> 8);
  }
  auto l = load_one(WriteTensor{"all", "F16", {256, 256}, bytes});
  std::vector<float> out(65536);
  l->weight->dequantize(out.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    double ref = test::ref_f16(uint16_t(h));
    if (std::isnan(ref)) ASSERT_TRUE(std::isnan(out[h])) << std::hex << h;
    else ASSERT_EQ(double(out[h]), ref) << std::hex << h;
    if (!std::isnan(ref)) ASSERT_EQ(std::signbit(out[h]), std::signbit(ref)) << std::hex << h;
  }
}

TEST(DenseTensor, F16FiniteBitPatternsThroughMatmul) {
  // The matmul converts F16 16 lanes at a time; one-hot inputs read every finite pattern
  // (subnormals and zeros included) back through that path: y[i, o] = w[o, i].
  const int64_t in = 1024, out = 62;
  std::vector<uint8_t> bytes;
  for (uint32_t h = 0; h < 65536; ++h)
    if (((h >> 10) & 31) != 31) bytes.insert(bytes.end(), {uint8_t(h), uint8_t(h >> 8)});
  ASSERT_EQ(bytes.size(), size_t(out * in * 2));
  auto l = load_one(WriteTensor{"w", "F16", {out, in}, bytes});
  std::vector<float> x(in * in, 0.f);
  for (int64_t i = 0; i < in; ++i) x[i * in + i] = 1.f;
  auto y = run_matmul(*l->weight, x, in);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      size_t at = size_t(o * in + i) * 2;
      ASSERT_EQ(double(y[i * out + o]), test::ref_f16(uint16_t(bytes[at] | (bytes[at + 1] << 8)))) << o << "," << i;
    }
}

TEST(DenseTensor, MisalignedSourceIsRead) {
  TempDir dir;
  // An odd header length puts the BF16 data at an odd address inside the mapping.
  std::string json = R"({"w":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]}})";
  ASSERT_EQ(json.size() % 2, 1u);
  test::write_bytes(dir.file("m.safetensors"), test::u64_le(json.size()) + json + std::string("\x80\x3f\x00\xc0\x40\x40", 6));
  auto ckpt = open_checkpoint(dir.path());
  DeviceOnlyBackend cpu("cpu");
  auto w = SafetensorsFormat().load(TensorGroup{"w", {ckpt->find("w")}}, cpu);
  std::vector<float> x = {1.f, 10.f, 100.f}, y(1);
  w->matmul(Tensor::f32(x.data(), 1, 3), Tensor::f32(y.data(), 1, 1));
  EXPECT_EQ(y[0], 1.f - 20.f + 300.f);
}

RawTensor fake_raw(const std::string& name, const std::string& dtype) {
  RawTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {1};
  return t;
}

TEST(SafetensorsFormat, ProbeGroup) {
  SafetensorsFormat fmt;
  RawTensor w_bf16 = fake_raw("l.in_proj.weight", "BF16"), w_u8 = fake_raw("l.in_proj.weight", "U8");
  RawTensor a_log = fake_raw("l.mixer.A_log", "F32"), a_i8 = fake_raw("l.mixer.A_log", "I8");
  RawTensor gate = fake_raw("l.gate.weight", "F16"), bias = fake_raw("l.gate.e_score_correction_bias", "F32");
  RawTensor only_bias = fake_raw("l.x.bias", "F32");
  EXPECT_EQ(fmt.probe_group({"l.in_proj", {&w_bf16}}), 10);
  EXPECT_EQ(fmt.probe_group({"l.in_proj", {&w_u8}}), 0);
  EXPECT_EQ(fmt.probe_group({"l.mixer.A_log", {&a_log}}), 10);
  EXPECT_EQ(fmt.probe_group({"l.mixer.A_log", {&a_i8}}), 0);
  EXPECT_EQ(fmt.probe_group({"l.gate", {&gate, &bias}}), 10);
  EXPECT_EQ(fmt.probe_group({"l.x", {&only_bias}}), 0);
  EXPECT_EQ(fmt.probe_group({"l.empty", {}}), 0);
}

TEST(SafetensorsFormat, LoadPicksWeightMemberAndRejectsOthers) {
  TempDir dir;
  write_file(dir.file("m.safetensors"), {make_f16("g.weight", {2, 3}, {1, 2, 3, 4, 5, 6}),
                                         make_f32("g.e_score_correction_bias", {2}, {7, 8}),
                                         make_bf16("p.packed", {1}, {0}), WriteTensor{"q.weight", "U8", {1}, {3}}});
  auto ckpt = open_checkpoint(dir.path());
  SafetensorsFormat fmt;
  DeviceOnlyBackend cpu("cpu"), cuda("cuda");
  TensorGroup g{"g", {ckpt->find("g.weight"), ckpt->find("g.e_score_correction_bias")}};
  auto w = fmt.load(g, cpu);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->type_name(), "F16");
  std::vector<float> out(6);
  w->dequantize(out.data());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6}));

  expect_error([&] { fmt.load(g, cuda); }, {"no kernels for device 'cuda'", "'g'"});
  expect_error([&] { fmt.load(TensorGroup{"q", {ckpt->find("q.weight")}}, cpu); }, {"'q'", "weight: U8"});
  expect_error([&] { fmt.load(TensorGroup{"p", {ckpt->find("p.packed")}}, cpu); }, {"'p'", "BF16, F16 or F32"});
}

}  // namespace
}  // namespace tandem::safetensors
