// The writer's edges: the global scale it picks divides back to the GGUF's multiplier exactly, and
// inputs with no MLX twin are one-line errors naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "formats/mlx/mlx_checkpoint.h"
#include "formats/mlx/mlx_repack.h"
#include "formats/mlx/mlx_writer.h"
#include "tandem/tensor.h"
#include "test_util.h"

namespace tandem::test {
namespace {

class FakeCheckpoint final : public Checkpoint {
 public:
  std::string path() const override { return "fake"; }
  std::string config_json() const override { return R"({"model_type": "nemotron_h"})"; }
  const std::vector<RawTensor>& tensors() const override { return tensors_; }
  std::vector<RawTensor> tensors_;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(4096);
};

// Every f32 multiplier m gets a global scale that divides back to m: an f32 one where one exists,
// else the F64 m·2688. Both kinds occur among random m (about a third of the binade has no f32 one).
TEST(MlxWriter, GlobalScaleDividesBackExactly) {
  std::mt19937_64 g(3);
  std::uniform_real_distribution<float> exp_d(-20.0f, 10.0f);
  int f32 = 0, f64 = 0;
  for (int i = 0; i < 20000; ++i) {
    const float m = std::exp2(exp_d(g));
    float gs = 0;
    if (mlx::nvfp4_global_scale_f32(m, gs)) {
      ASSERT_EQ(mlx::nvfp4_multiplier(gs), m) << "m = " << m;
      ++f32;
    } else {
      ASSERT_EQ(mlx::nvfp4_multiplier(double(m) * 2688.0), m) << "m = " << m;
      ++f64;
    }
  }
  EXPECT_GT(f32, 1000);
  EXPECT_GT(f64, 1000);
}

// An NVFP4 weight whose `.scale` has no f32 global scale: written as F64, read back to the same bits.
TEST(MlxWriter, NvfpScaleWithoutF32GlobalScaleRoundTrips) {
  std::mt19937_64 g(4);
  float m = 0, unused = 0;
  do m = std::exp2(std::uniform_real_distribution<float>(-8.0f, 0.0f)(g));
  while (mlx::nvfp4_global_scale_f32(m, unused));
  FakeCheckpoint ck;
  for (size_t i = 0; i < ck.bytes.size(); ++i) ck.bytes[i] = uint8_t(g());
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 4; ++s) ck.bytes[size_t(36 * b + s)] = 0x30;  // finite UE4M3 block scales
  std::vector<uint8_t> sc(4);
  std::memcpy(sc.data(), &m, 4);
  ck.tensors_.push_back(RawTensor{"a.in_proj.weight", "NVFP4", {2, 64}, ck.bytes.data(), 72, "fake"});
  ck.tensors_.push_back(RawTensor{"a.in_proj.scale", "F32", {1}, sc.data(), 4, "fake"});
  TempDir tmp("tandem-mlx");
  mlx::write_mlx_folder(ck, tmp.file("out"));
  auto back = mlx::open_folder(tmp.file("out"));
  const RawTensor* w = back->find("a.in_proj.weight");
  const RawTensor* s = back->find("a.in_proj.scale");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(s, nullptr);
  float got;
  std::memcpy(&got, s->data, 4);
  EXPECT_EQ(got, m);
  ASSERT_EQ(w->nbytes, 72u);
  EXPECT_EQ(std::memcmp(w->data, ck.bytes.data(), 72), 0);  // bit 7 clear, no 0x7F: the same bytes
}

TEST(MlxWriter, TypeWithoutMlxLayoutIsAnError) {
  FakeCheckpoint ck;
  ck.tensors_.push_back(
      RawTensor{"backbone.layers.0.mixer.in_proj.weight", "Q4_K", {2, 256}, ck.bytes.data(), 288, "fake"});
  TempDir tmp("tandem-mlx");
  expect_error([&] { mlx::write_mlx_folder(ck, tmp.file("out")); },
               {"'backbone.layers.0.mixer.in_proj.weight'", "Q4_K", "no MLX layout"});
}

TEST(MlxWriter, ExpertsOfMixedTypesAreAnError) {
  FakeCheckpoint ck;
  const std::string p = "backbone.layers.1.mixer.experts.";
  ck.tensors_.push_back(RawTensor{p + "0.up_proj.weight", "Q8_0", {1, 32}, ck.bytes.data(), 34, "fake"});
  ck.tensors_.push_back(RawTensor{p + "1.up_proj.weight", "IQ2_XXS", {1, 256}, ck.bytes.data(), 66, "fake"});
  TempDir tmp("tandem-mlx");
  expect_error([&] { mlx::write_mlx_folder(ck, tmp.file("out")); },
               {"'" + p + "1.up_proj.weight'", "expert 0 is Q8_0"});
  ck.tensors_.pop_back();
  ck.tensors_.push_back(RawTensor{p + "2.up_proj.weight", "Q8_0", {1, 32}, ck.bytes.data(), 34, "fake"});
  expect_error([&] { mlx::write_mlx_folder(ck, tmp.file("out2")); }, {"switch_mlp.fc1", "expert 1 is missing"});
}

TEST(MlxWriter, Q8_0ScaleWhoseBiasOverflowsFp16IsAnError) {
  std::vector<uint8_t> block(34 * 2, 0);
  const uint16_t big = f32_to_f16(1000.0f);  // −128·1000 is past fp16's 65504
  block[34] = uint8_t(big), block[35] = uint8_t(big >> 8);
  std::vector<uint8_t> w(64), s(4), b(4);
  expect_error([&] {
    mlx::q8_0_to_affine8(block.data(), 2, 32, w.data(), s.data(), b.data(), "mlx writer: tensor 'q'");
  },
               {"'q'", "block 0 of row 1", "d = 1000", "does not fit in fp16"});
}

}  // namespace
}  // namespace tandem::test
