// The GGUF Writer (formats/gguf/gguf_file_writer.h): a streamed file, fed in chunks that cross tensor
// boundaries, is byte for byte what write_gguf writes (alignment padding after each tensor); random
// blocks dequantize to the rms asked for; NVFP4's companion scale carries the rms instead.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "formats/gguf/gguf_file_writer.h"
#include "formats/gguf/gguf_writer.h"
#include "formats/gguf/quant.h"
#include "test_util.h"

namespace tandem::gguf {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(GgufWriter, StreamedFileEqualsWriteGguf) {
  test::TempDir dir("gguf-writer");
  std::vector<float> a(5), b(64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) - 2;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i) * 0.25f;
  std::vector<WriteTensor> tensors = {make_f32("a", {5}, a), make_f16("b", {32, 2}, b), make_f32("c", {3}, {1, 2, 3})};
  Metadata md;
  md.set("general.name", Value::str("streamed"));
  write_gguf(dir.file("ref.gguf"), md, tensors);

  GgufWriter w;
  std::vector<TensorSpec> specs;
  std::string bytes;
  for (const auto& t : tensors) {
    specs.push_back({t.name, ggml_type_info(t.type)->name, t.ne});
    bytes.append(t.data.begin(), t.data.end());
  }
  EXPECT_EQ(w.tensor_bytes(specs[1]), 128u);
  FileInfo info;
  info.name = "streamed";
  auto f = w.create(dir.file("out.gguf"), specs, info);
  for (size_t i = 0; i < bytes.size(); i += 13) f->write(bytes.data() + i, std::min<size_t>(13, bytes.size() - i));
  f->close();
  EXPECT_EQ(slurp(dir.file("out.gguf")), slurp(dir.file("ref.gguf")));

  auto g = w.create(dir.file("short.gguf"), specs, info);
  g->write(bytes.data(), 20);
  EXPECT_THROW(g->close(), Error);
  EXPECT_THROW(w.create(dir.file("bad.gguf"), {{"x", "Q9_9", {32}}}, info), Error);
}

TEST(GgufWriter, RandomBlocksHaveTheRmsAskedFor) {
  GgufWriter w;
  for (const char* type : {"Q8_0", "IQ4_NL", "IQ2_XXS", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XS", "IQ2_S", "IQ3_XXS",
                           "IQ3_S", "IQ1_M"}) {
    const GgmlTypeInfo* g = ggml_type_info(type);
    const QuantType* q = find_type(g->id);
    ASSERT_NE(q, nullptr) << type;
    constexpr int kBlocks = 512;
    std::vector<uint8_t> blocks(size_t(kBlocks) * size_t(g->block_bytes));
    Rng rng(11);
    ASSERT_TRUE(w.random_blocks(type, 0.05, rng, blocks.data(), kBlocks));
    std::vector<float> v(size_t(kBlocks) * size_t(g->block_elems));
    q->dequantize(blocks.data(), v.data(), int64_t(v.size()));
    double ss = 0;
    for (float x : v) ss += double(x) * x;
    double sum = 0;
    for (float x : v) sum += x;
    EXPECT_NEAR(std::sqrt(ss / double(v.size())), 0.05, 0.005) << type;
    EXPECT_LT(std::abs(sum / double(v.size())), 0.01) << type << ": values centred on zero";
    EXPECT_FALSE(w.companion_scale(type, 0.05).has_value()) << type;
  }
  // NVFP4 blocks stay at unit scale; the tensor scale brings them to the rms.
  const QuantType* q = find_type(40);
  ASSERT_NE(q, nullptr);
  std::vector<uint8_t> blocks(size_t(256) * size_t(q->block_bytes));
  Rng rng(12);
  ASSERT_TRUE(w.random_blocks("NVFP4", 0.05, rng, blocks.data(), 256));
  std::vector<float> v(size_t(256) * size_t(q->block_elems));
  q->dequantize(blocks.data(), v.data(), int64_t(v.size()));
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  const auto s = w.companion_scale("NVFP4", 0.05);
  ASSERT_TRUE(s.has_value());
  EXPECT_NEAR(std::sqrt(ss / double(v.size())) * *s, 0.05, 0.005);
  uint8_t one[64];
  EXPECT_FALSE(w.random_blocks("Q4_0", 1.0, rng, one, 0));  // a type it has no generator for
  EXPECT_FALSE(w.random_blocks("F16", 1.0, rng, one, 0));
}

}  // namespace
}  // namespace tandem::gguf
