// MLX folders built by hand: each mode's tensors decoded by a computation written here from
// spec/formats.md (§ 3.8 IQ2_XXS on the MLX words, § 7.1 nvfp4 as e2m1·e4m3·global/2688, MLX affine as
// scale·u + bias), compared exactly with what the gguf format decodes from the transcoded blocks; the
// probe; and one-line errors naming file and tensor for bad folders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "formats/mlx/mlx_checkpoint.h"
#include "formats/mlx/mlx_files.h"
#include "tandem/backend.h"
#include "tandem/registry.h"
#include "tandem/tensor.h"
#include "test_util.h"

namespace tandem::gguf {
#include "formats/gguf/iq_tables.inc"  // the IQ2_XXS grid (data, § 3.15); the decoding below is our own
}

namespace tandem::test {
namespace {

struct Blob {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void write_folder(const std::string& dir, const std::string& config, const std::vector<Blob>& blobs) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  std::vector<mlx::OutTensor> specs;
  for (const Blob& b : blobs) specs.push_back({b.name, b.dtype, b.shape});
  mlx::SafetensorsOut out(dir + "/model.safetensors", specs);
  for (const Blob& b : blobs) out.write(b.bytes.data(), b.bytes.size());
  out.close();
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& g) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = uint8_t(g());
  return v;
}

uint32_t word(const std::vector<uint8_t>& b, size_t i) {
  return uint32_t(b[4 * i]) | uint32_t(b[4 * i + 1]) << 8 | uint32_t(b[4 * i + 2]) << 16 | uint32_t(b[4 * i + 3]) << 24;
}
uint16_t u16(const std::vector<uint8_t>& b, size_t i) { return uint16_t(b[2 * i] | b[2 * i + 1] << 8); }
void put16(std::vector<uint8_t>& b, size_t i, uint16_t v) { b[2 * i] = uint8_t(v), b[2 * i + 1] = uint8_t(v >> 8); }

// fp16 scales of moderate size (exponent 2^-9..2^-2), random sign and mantissa.
std::vector<uint8_t> f16_scales(size_t n, std::mt19937_64& g) {
  std::vector<uint8_t> v(2 * n);
  for (size_t i = 0; i < n; ++i) put16(v, i, uint16_t((g() & 0x83FF) | ((6 + g() % 8) << 10)));
  return v;
}

// E4M3 per the OCP FP8 definition: bias 7, subnormals at e = 0, 0x7F/0xFF NaN.
float e4m3(uint8_t x) {
  const int e = (x >> 3) & 15, m = x & 7;
  const float mag =
      e == 0 ? float(m) / 8.0f * std::ldexp(1.0f, -6) : (1.0f + float(m) / 8.0f) * std::ldexp(1.0f, e - 7);
  return (x & 0x80) ? -mag : mag;
}
float e2m1(int n) {
  static const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (n & 8) ? -mags[n & 7] : mags[n & 7];
}

const char* kConfig = R"({"model_type": "nemotron_h",
  "quantization": {"group_size": 32, "bits": 8, "mode": "affine",
    "m.iq2": {"group_size": 256, "bits": 2, "mode": "iq2_xxs"},
    "m.fp4": {"group_size": 16, "bits": 4, "mode": "nvfp4"},
    "m.q8wide": {"group_size": 64, "bits": 8, "mode": "affine"},
    "b.mixer.switch_mlp.fc1": {"group_size": 256, "bits": 2, "mode": "iq2_xxs"}}})";

struct Built {
  std::vector<Blob> blobs;
  std::map<std::string, std::vector<float>> expect;  // presented name → independent decoding
};

// m.iq2: iq2_xxs [3, 512]; m.fp4: nvfp4 [4, 128] with a global scale and some negative scales;
// m.q8: affine 8-bit group 32, F16, [2, 96]; m.q8wide: group 64, BF16 scales, [2, 128];
// b.mixer.switch_mlp.fc1: 2 stacked iq2_xxs experts [2, 256]; c.weight: BF16 [3, 5].
Built build(uint64_t seed) {
  std::mt19937_64 g(seed);
  Built b;
  auto iq2 = [&](const std::string& module, int64_t e, int64_t n, int64_t k, const std::string& present) {
    auto w = random_bytes(size_t(e * n * k / 4), g);
    auto s = f16_scales(size_t(e * n * k / 256), g);
    std::vector<int64_t> ws = {n, k / 16}, ss = {n, k / 256};
    if (e > 1) ws.insert(ws.begin(), e), ss.insert(ss.begin(), e);
    b.blobs.push_back({module + ".weight", "U32", ws, w});
    b.blobs.push_back({module + ".scales", "F16", ss, s});
    for (int64_t j = 0; j < e; ++j) {
      std::vector<float> y(size_t(n * k));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t blk = 0; blk < k / 256; ++blk) {
          const int64_t row = j * n + r;
          const float d = f16_to_f32(u16(s, size_t(row * (k / 256) + blk)));
          const size_t w0 = size_t(row * (k / 16) + blk * 16);
          for (int ib = 0; ib < 8; ++ib) {
            const uint32_t a0 = word(w, w0 + 2 * ib), a1 = word(w, w0 + 2 * ib + 1);
            const float db = d * (0.5f + float(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
              const uint64_t grid = gguf::iq2xxs_grid[(a0 >> (8 * l)) & 255];
              uint32_t signs = (a1 >> (7 * l)) & 127;
              signs |= uint32_t(__builtin_popcount(signs) & 1) << 7;  // even parity (§ 3.8)
              for (int q = 0; q < 8; ++q) {
                const float gv = float((grid >> (8 * q)) & 255);
                y[size_t(r * k + blk * 256 + ib * 32 + l * 8 + q)] = db * gv * ((signs >> q) & 1 ? -1.0f : 1.0f);
              }
            }
          }
        }
      b.expect[(e > 1 ? "b.mixer.experts." + std::to_string(j) + ".up_proj" : present) + ".weight"] = y;
    }
  };
  iq2("m.iq2", 1, 3, 512, "m.iq2");
  iq2("b.mixer.switch_mlp.fc1", 2, 2, 256, "");

  {  // nvfp4
    const int64_t n = 4, k = 128;
    auto w = random_bytes(size_t(n * k / 2), g);
    std::vector<uint8_t> s(size_t(n * k / 16));
    for (auto& x : s) {
      x = uint8_t(0x20 + g() % 0x40);  // exponents 4..11: 2^-3..2^4
      if (g() % 4 == 0) x |= 0x80;     // negative scales: exact as flipped element signs
    }
    s[3] = 0x00, s[5] = 0x80;          // zero and negative zero
    const float gscale = 2688.0f * 0.37f;
    std::vector<uint8_t> gs(4);
    std::memcpy(gs.data(), &gscale, 4);
    b.blobs.push_back({"m.fp4.weight", "U32", {n, k / 8}, w});
    b.blobs.push_back({"m.fp4.scales", "U8", {n, k / 16}, s});
    b.blobs.push_back({"m.fp4.global_scale", "F32", {}, gs});
    const float mult = gscale / 2688.0f;
    std::vector<float> y(size_t(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int nib = (word(w, size_t((r * k + c) / 8)) >> (4 * (c % 8))) & 15;
        y[size_t(r * k + c)] = e2m1(nib) * e4m3(s[size_t(r * (k / 16) + c / 16)]) * mult;
      }
    b.expect["m.fp4.weight"] = y;
  }

  auto affine = [&](const std::string& module, int64_t n, int64_t k, int64_t group, bool bf16) {
    auto w = random_bytes(size_t(n * k), g);
    const size_t ng = size_t(n * k / group);
    std::vector<uint8_t> s(2 * ng), bias(2 * ng);
    std::vector<float> sv(ng);
    for (size_t i = 0; i < ng; ++i) {
      // A BF16 scale that fp16 holds exactly: 7 mantissa bits, exponent within fp16's normal range.
      const float v = std::ldexp(float(int(g() % 128) + 128) / 256.0f, -int(g() % 8)) * (g() % 2 ? -1.0f : 1.0f);
      sv[i] = v;
      put16(s, i, bf16 ? f32_to_bf16(v) : f32_to_f16(v));
      put16(bias, i, bf16 ? f32_to_bf16(-128.0f * v) : f32_to_f16(-128.0f * v));
    }
    const char* dt = bf16 ? "BF16" : "F16";
    b.blobs.push_back({module + ".weight", "U32", {n, k / 4}, w});
    b.blobs.push_back({module + ".scales", dt, {n, k / group}, s});
    b.blobs.push_back({module + ".biases", dt, {n, k / group}, bias});
    std::vector<float> y(size_t(n * k));
    for (int64_t i = 0; i < n * k; ++i) {
      const size_t gi = size_t(i / group);
      const float sc = bf16 ? bf16_to_f32(u16(s, gi)) : f16_to_f32(u16(s, gi));
      const float bi = bf16 ? bf16_to_f32(u16(bias, gi)) : f16_to_f32(u16(bias, gi));
      y[size_t(i)] = sc * float(w[size_t(i)]) + bi;  // MLX's affine dequantization
    }
    b.expect[module + ".weight"] = y;
  };
  affine("m.q8", 2, 96, 32, false);
  affine("m.q8wide", 2, 128, 64, true);

  std::vector<uint8_t> c(30);
  std::vector<float> cv(15);
  for (int i = 0; i < 15; ++i) {
    cv[size_t(i)] = bf16_to_f32(f32_to_bf16(float(i) - 7.25f));
    put16(c, size_t(i), f32_to_bf16(cv[size_t(i)]));
  }
  b.blobs.push_back({"c.weight", "BF16", {3, 5}, c});
  b.expect["c.weight"] = cv;
  return b;
}

class MlxReader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reg_ = new PluginRegistry();
    reg_->load_directory(plugin_dir());
  }
  static void TearDownTestSuite() { delete reg_; }

  std::vector<float> decode(const Checkpoint& ck, const std::string& name) {
    const RawTensor* t = ck.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    TensorGroup grp;
    grp.prefix = name.substr(0, name.size() - 7);
    grp.members.push_back(t);
    if (const RawTensor* s = ck.find(grp.prefix + ".scale")) grp.members.push_back(s);
    auto q = reg_->format("gguf")->load(grp, *reg_->backend("cpu"));
    std::vector<float> out(size_t(q->rows() * q->cols()), std::nanf(""));
    q->dequantize(out.data());
    return out;
  }

  static PluginRegistry* reg_;
};
PluginRegistry* MlxReader::reg_ = nullptr;

TEST_F(MlxReader, EveryModeDecodesAsTheIndependentComputation) {
  TempDir tmp("tandem-mlx");
  const Built b = build(11);
  write_folder(tmp.path(), kConfig, b.blobs);
  EXPECT_EQ(mlx::probe_folder(tmp.path()), 150);
  auto ck = mlx::open_folder(tmp.path());
  const std::map<std::string, std::string> types = {
      {"m.iq2.weight", "IQ2_XXS"}, {"m.fp4.weight", "NVFP4"}, {"m.q8.weight", "Q8_0"}, {"m.q8wide.weight", "Q8_0"},
      {"b.mixer.experts.0.up_proj.weight", "IQ2_XXS"}, {"b.mixer.experts.1.up_proj.weight", "IQ2_XXS"},
      {"c.weight", "BF16"}};
  for (const auto& [name, type] : types) {
    const RawTensor* t = ck->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, type) << name;
  }
  EXPECT_EQ(ck->find("m.iq2.scales"), nullptr);  // consumed by the transcode
  ASSERT_NE(ck->find("m.fp4.scale"), nullptr);
  for (const auto& [name, want] : b.expect) {
    const std::vector<float> got = decode(*ck, name);
    ASSERT_EQ(got.size(), want.size()) << name;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += !(got[i] == want[i]);
    EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << got.size() << " values differ";
  }
}

TEST_F(MlxReader, ProbeLeavesPlainFoldersAlone) {
  TempDir tmp("tandem-mlx");
  write_folder(tmp.path(), R"({"model_type": "nemotron_h"})", {{"c.weight", "BF16", {1}, {0, 0}}});
  EXPECT_EQ(mlx::probe_folder(tmp.path()), 0);
  EXPECT_EQ(mlx::probe_folder(tmp.file("model.safetensors")), 0);
}

// Builds the standard folder with `mutate` applied to the blobs and config, and expects open to fail.
void expect_open_error(const std::function<void(std::vector<Blob>&, std::string&)>& mutate,
                       std::initializer_list<std::string> parts) {
  TempDir tmp("tandem-mlx");
  Built b = build(5);
  std::string config = kConfig;
  mutate(b.blobs, config);
  write_folder(tmp.path(), config, b.blobs);
  expect_error([&] { mlx::open_folder(tmp.path()); }, parts);
}

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

Blob& blob(std::vector<Blob>& v, const std::string& name) {
  for (Blob& b : v)
    if (b.name == name) return b;
  throw std::runtime_error("no blob " + name);
}

TEST_F(MlxReader, MissingScalesNameFileAndTensor) {
  expect_open_error([](std::vector<Blob>& v, std::string&) {
    v.erase(std::find_if(v.begin(), v.end(), [](const Blob& b) { return b.name == "m.iq2.scales"; }));
  }, {"model.safetensors", "'m.iq2.weight'", "is U32", "'m.iq2.scales' is missing"});
  expect_open_error([](std::vector<Blob>& v, std::string&) {
    v.erase(std::find_if(v.begin(), v.end(), [](const Blob& b) { return b.name == "m.q8.biases"; }));
  }, {"model.safetensors", "'m.q8.weight'", "m.q8.biases", "missing"});
}

TEST_F(MlxReader, WrongShapesNameFileAndTensor) {
  expect_open_error([](std::vector<Blob>& v, std::string&) {
    Blob& s = blob(v, "m.iq2.scales");
    s.shape = {3, 1};
    s.bytes.resize(6);
  }, {"model.safetensors", "'m.iq2.scales'", "expected F16 [3, 2]", "found F16 [3, 1]"});
  expect_open_error([](std::vector<Blob>& v, std::string&) { blob(v, "m.fp4.scales").dtype = "I8"; },
                    {"model.safetensors", "'m.fp4.scales'", "expected U8 [4, 8]", "found I8"});
  expect_open_error([](std::vector<Blob>& v, std::string&) {
    Blob& w = blob(v, "m.fp4.weight");
    w.shape = {4, 12};  // 96 elements: not whole NVFP4 blocks of 64
    w.bytes.resize(4 * 12 * 4);
  }, {"model.safetensors", "'m.fp4.weight'", "not whole NVFP4 blocks of 64"});
}

TEST_F(MlxReader, AffineGroupThatIsNotQ8_0NamesTheGroup) {
  expect_open_error([](std::vector<Blob>& v, std::string&) {
    Blob& b = blob(v, "m.q8.biases");  // [2, 3]: row 1, group 2
    put16(b.bytes, 5, f32_to_f16(0.5f));
  }, {"model.safetensors", "'m.q8.weight'", "group 2 of row 1", "elements 64..95", "not a Q8_0 transcode"});
  expect_open_error([](std::vector<Blob>& v, std::string& config) {
    (void)v;
    replace_once(config, "\"bits\": 8, \"mode\": \"affine\",", "\"bits\": 4, \"mode\": \"affine\",");
  }, {"config.json", "'m.q8.weight'", "bits 4", "not a Q8_0 transcode"});
}

TEST_F(MlxReader, UnknownModeNamesConfigAndTensor) {
  expect_open_error([](std::vector<Blob>&, std::string& config) {
    replace_once(config, "\"mode\": \"nvfp4\"", "\"mode\": \"mxfp4\"");
  }, {"config.json", "'m.fp4.weight'", "unknown quantization mode 'mxfp4'"});
}

TEST_F(MlxReader, NanNvfp4ScaleIsAnError) {
  expect_open_error([](std::vector<Blob>& v, std::string&) { blob(v, "m.fp4.scales").bytes[9] = 0x7F; },
                    {"model.safetensors", "'m.fp4.weight'", "scale 1 of row 1", "NaN (0x7F)"});
}

}  // namespace
}  // namespace tandem::test

namespace tandem::test {
namespace {

// A safetensors file with the given header text and `data` bytes of payload.
void write_raw(const std::string& path, const std::string& header, size_t data, uint64_t claimed_len = 0) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = claimed_len ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) f.put(char(uint8_t(n >> (8 * i))));
  f << header << std::string(data, '\0');
}

TEST(MlxFiles, BadSafetensorsAreOneLineErrorsNamingTheFile) {
  TempDir tmp("tandem-mlx");
  const std::string p = tmp.file("m.safetensors");
  auto bad = [&](const std::string& header, size_t data, std::initializer_list<std::string> parts, uint64_t len = 0) {
    write_raw(p, header, data, len);
    const auto open = [&] { mlx::MappedFile f(p); };
    expect_error(open, {"mlx: file '" + p + "'"});
    for (const auto& part : parts) expect_error(open, {part});
  };
  bad(R"({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 2, {"'a'", "outside the 2 data bytes"});
  bad(R"({"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 4]}})", 4, {"'a'", "needs 6 bytes"});
  bad(R"({"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}})", 1, {"'a'", "unknown dtype 'Q9'"});
  bad(R"({"a": {"dtype": "F16", "shape": [1]}})", 2, {"'a'", "data_offsets"});
  bad(R"({"a": )", 0, {"not a JSON object"});
  bad(R"({})", 0, {"header length 1000", "exceeds the file"}, 1000);
  write_raw(p, "", 0);
  std::filesystem::resize_file(p, 5);
  expect_error([&] { mlx::MappedFile f(p); }, {p, "shorter than a safetensors header"});
  // A valid file reads back.
  write_raw(p, R"({"__metadata__": {"format": "mlx"}, "a": {"dtype": "U32", "shape": [2, 1], "data_offsets": [0, 8]}})",
            8);
  mlx::MappedFile ok(p);
  ASSERT_EQ(ok.tensors().size(), 1u);
  EXPECT_EQ(ok.tensors()[0].name, "a");
  EXPECT_EQ(ok.tensors()[0].shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ok.tensors()[0].nbytes, 8u);
}

// Found reading the reader while fuzz_mlx was written (docs/fuzzing.md): a shape whose element count
// wraps to 0 (three dimensions of 2^39) was accepted with no bytes, a [2^39, 0] stack of float experts
// was split into 2^39 views (an out-of-memory), a name holding a newline broke the one-line error, and
// deep nesting overflowed the stack of RapidJSON's recursive parser.
TEST(MlxFiles, HostileShapesAndNamesAreOneLineErrors) {
  TempDir tmp("tandem-mlx");
  const std::string p = tmp.file("m.safetensors");
  write_raw(p, R"({"w": {"dtype": "U32", "shape": [549755813888, 549755813888, 549755813888], "data_offsets": [0, 0]}})",
            0);
  expect_error([&] { mlx::MappedFile f(p); }, {p, "'w'", "more than 2^44 elements"});

  const std::string dir = tmp.file("folder");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "nemotron_h"})";
  write_raw(dir + "/model.safetensors",
            R"({"b.mixer.switch_mlp.fc1.weight": {"dtype": "BF16", "shape": [549755813888, 0], "data_offsets": [0, 0]}})", 0);
  expect_error([&] { mlx::open_folder(dir); },
               {"model.safetensors", "'b.mixer.switch_mlp.fc1.weight'", "stacked experts BF16 [549755813888, 0]"});

  write_raw(dir + "/model.safetensors", R"({"a\nb.weight": {"dtype": "U32", "shape": [1, 1], "data_offsets": [0, 4]}})", 4);
  expect_error([&] { mlx::open_folder(dir); }, {"'a?b.weight' is U32", "'a?b.scales' is missing"});
  write_raw(dir + "/model.safetensors", R"({"a\nb": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}})", 1);
  expect_error([&] { mlx::open_folder(dir); }, {"'a?b'", "unknown dtype 'Q9'"});
  // A million nested lists in config.json overflowed the stack of RapidJSON's recursive parser.
  std::ofstream(dir + "/config.json") << "{\"a\": " << std::string(1000000, '[') << std::string(1000000, ']') << "}";
  expect_error([&] { mlx::open_folder(dir); }, {"config.json", "nests deeper than 64 levels"});
  EXPECT_EQ(mlx::probe_folder(dir), 0);
}

}  // namespace
}  // namespace tandem::test
