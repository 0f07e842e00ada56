// Malformed EXL3 groups: every one a one-line error naming the tensor; probe_group scores; the
// device rule.
#include <gtest/gtest.h>

#include "device_only_backend.h"
#include "exl3_test_util.h"
#include "formats/exl3/exl3_cpu.h"
#include "formats/exl3/exl3_format.h"
#include "tandem/backend.h"
#include "test_util.h"

using namespace tandem;
using exl3_test::GroupBuilder;
using exl3_test::RandomLinear;
using test::DeviceOnlyBackend;

namespace {

const char* kName = "backbone.layers.2.mixer.q_proj";

// A valid 128 × 256 (in × out) group with every member, minus `skip`, plus what `extra` adds.
TensorGroup make(GroupBuilder& b, const std::string& skip = "", std::vector<int64_t> shape = {}) {
  RandomLinear lin(128, 256, 3, 2, 1);
  const std::string p = kName;
  if (skip != "trellis") b.add_words(p + ".trellis", {8, 16, 48}, lin.trellis);
  if (skip != "suh") b.add_f16(p + ".suh", lin.suh);
  if (skip != "svh") b.add_f16(p + ".svh", lin.svh);
  if (skip != "mul1") b.add_i32(p + ".mul1", 0x83DCD12Du);
  return b.group(p, std::move(shape));
}

void expect_load_error(const TensorGroup& g, std::initializer_list<std::string> parts) {
  test::expect_error([&] { exl3::Exl3Tensor t(g); }, parts);
}

std::vector<uint16_t> words(size_t n) { return std::vector<uint16_t>(n, 0x1234); }

}  // namespace

TEST(Exl3Errors, MissingScales) {
  {
    GroupBuilder b;
    expect_load_error(make(b, "suh"), {"'backbone.layers.2.mixer.q_proj.suh' is missing"});
  }
  {
    GroupBuilder b;
    expect_load_error(make(b, "svh"), {"'backbone.layers.2.mixer.q_proj.svh' is missing"});
  }
}

TEST(Exl3Errors, TrellisDtypeAndShape) {
  const std::string p = kName;
  auto with_trellis = [&](const std::string& dtype, std::vector<int64_t> shape, size_t n_words) {
    GroupBuilder b;
    RandomLinear lin(128, 256, 3, 2, 1);
    b.add_words(p + ".trellis", std::move(shape), words(n_words), dtype);
    b.add_f16(p + ".suh", lin.suh);
    b.add_f16(p + ".svh", lin.svh);
    return b;
  };
  {
    GroupBuilder b = with_trellis("F16", {8, 16, 48}, 8 * 16 * 48);
    expect_load_error(b.group(p), {"q_proj.trellis", "dtype I16", "F16"});
  }
  {
    GroupBuilder b = with_trellis("I16", {128, 256}, 128 * 256);
    expect_load_error(b.group(p), {"q_proj.trellis", "[128, 256]"});
  }
  {
    GroupBuilder b = with_trellis("I16", {8, 16, 40}, 8 * 16 * 40);
    expect_load_error(b.group(p), {"q_proj.trellis", "[8, 16, 40]"});
  }
  {
    GroupBuilder b = with_trellis("I16", {8, 16, 144}, 8 * 16 * 144);
    expect_load_error(b.group(p), {"q_proj.trellis", "K = ", "9", "out of range 1..8"});
  }
  {
    GroupBuilder b = with_trellis("I16", {8, 16, 0}, 0);
    expect_load_error(b.group(p), {"q_proj.trellis", "[8, 16, 0]"});
  }
  {
    GroupBuilder b = with_trellis("I16", {4, 16, 48}, 4 * 16 * 48);  // k = 64: not a multiple of 128
    expect_load_error(b.group(p), {"q_proj.trellis", "multiples of 128"});
  }
}

TEST(Exl3Errors, CodebookMarkers) {
  const std::string p = kName;
  {
    GroupBuilder b;
    make(b, "mul1");
    b.add_i32(p + ".mul1", 0x12345678u);
    expect_load_error(b.group(p), {"q_proj.mul1", "unknown codebook marker"});
  }
  {
    GroupBuilder b;
    make(b);
    b.add_i32(p + ".mcg", 0xCBAC1FEDu);
    expect_load_error(b.group(p), {"q_proj", "both 'mcg' and 'mul1'"});
  }
  {
    GroupBuilder b;
    make(b, "mul1");
    b.add_words(p + ".mcg", {2}, {1, 2}, "I16");
    expect_load_error(b.group(p), {"q_proj.mcg", "one I32 value"});
  }
}

TEST(Exl3Errors, ScaleAndBiasLengths) {
  const std::string p = kName;
  RandomLinear lin(128, 256, 3, 2, 1);
  {
    GroupBuilder b;
    b.add_words(p + ".trellis", {8, 16, 48}, lin.trellis);
    b.add_f16(p + ".suh", std::vector<uint16_t>(256, 0x3C00));
    b.add_f16(p + ".svh", lin.svh);
    expect_load_error(b.group(p), {"q_proj.suh", "[128]", "[256]"});
  }
  {
    GroupBuilder b;
    b.add_words(p + ".trellis", {8, 16, 48}, lin.trellis);
    b.add_f16(p + ".suh", lin.suh);
    b.add_words(p + ".svh", {256}, lin.svh, "BF16");
    expect_load_error(b.group(p), {"q_proj.svh", "F16", "BF16"});
  }
  {
    GroupBuilder b;
    make(b);
    b.add_f16(p + ".bias", std::vector<uint16_t>(100, 0));
    expect_load_error(b.group(p, {200, 128}), {"q_proj.bias", "[200]", "[100]"});
  }
}

TEST(Exl3Errors, ExpectedShapeLargerThanStorage) {
  GroupBuilder b;
  expect_load_error(make(b, "", {300, 128}), {"q_proj.trellis", "[300, 128]"});
  GroupBuilder b2;
  expect_load_error(make(b2, "", {256, 129}), {"q_proj.trellis", "[256, 129]"});
}

TEST(Exl3Format, ProbeScoresAndDevice) {
  exl3::Exl3Format f;
  {
    GroupBuilder b;
    EXPECT_EQ(f.probe_group(make(b)), 30);
  }
  {
    GroupBuilder b;
    EXPECT_EQ(f.probe_group(make(b, "mul1")), 30);  // 3INST: no marker
  }
  {
    GroupBuilder b;
    EXPECT_EQ(f.probe_group(make(b, "svh")), 1);  // claimed so that load() names the missing tensor
  }
  {
    GroupBuilder b;
    b.add("x.weight", "BF16", {2, 2}, std::vector<uint8_t>(8));
    EXPECT_EQ(f.probe_group(b.group("x")), 0);
  }
  GroupBuilder b;
  TensorGroup g = make(b);
  DeviceOnlyBackend cpu("cpu"), cuda("cuda");
  auto t = f.load(g, cpu);
  EXPECT_EQ(t->type_name(), "EXL3_K3_mul1");
  test::expect_error([&] { f.load(g, cuda); }, {"exl3", "device 'cuda'", "q_proj"});
  GroupBuilder b2;
  test::expect_error([&] { f.load(make(b2, "suh"), cpu); }, {"q_proj.suh' is missing"});
}
