// The ModelOpt NVFP4/FP8 format: encodings and exact dequantization against the independent decoder
// of nvfp4_test_util.h, matmul against dequantize-then-multiply and batch invariance, the GGUF repack
// the CUDA module uses (decoded by the GGUF CPU kernels), both config forms, exclude wildcards,
// mixed NVFP4/FP8/BF16 modules, a sharded folder, the plugins' claims, and every refused input as a
// one-line error naming the file and tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/gguf/kernels_cpu.h"
#include "formats/nvfp4/encodings.h"
#include "formats/nvfp4/modelopt_config.h"
#include "formats/nvfp4/nvfp4_checkpoint.h"
#include "formats/nvfp4/nvfp4_cpu.h"
#include "formats/nvfp4/repack.h"
#include "nvfp4_test_util.h"
#include "tandem/backend.h"
#include "tandem/registry.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::nvfp4;
using namespace tandem::nvfp4::test;
using tandem::test::expect_error;
using tandem::test::TempDir;

namespace {

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const char* kPlainConfig = R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h"})";

std::string hf_quant(const std::string& algo, const std::string& excludes = "[]", const std::string& extra = "") {
  return R"({"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": {"quant_algo": ")" + algo +
         R"(", "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": )" + excludes + extra + "}}";
}

std::string config_with(const std::string& quantization_config) {
  return R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "quantization_config": )" +
         quantization_config + "}";
}

// A folder with config.json (and hf_quant_config.json when given) and one model.safetensors.
std::string folder(const TempDir& d, const std::string& name, const std::vector<st::WriteTensor>& tensors,
                   const std::string& config, const std::string& hf = "") {
  const std::string dir = d.file(name);
  std::filesystem::create_directories(dir);
  write_text(dir + "/config.json", config);
  if (!hf.empty()) write_text(dir + "/hf_quant_config.json", hf);
  st::write_file(dir + "/model.safetensors", tensors);
  return dir;
}

struct Fixture {
  Nvfp4Linear a = quantize_nvfp4(random_weights(24, 96, 1, 0.05), 24, 96);
  Fp8Linear b = quantize_fp8(random_weights(16, 64, 2, 0.1), 16, 64);
  std::vector<float> dense = random_weights(8, 32, 3, 1.0);
  std::vector<st::WriteTensor> tensors() const {
    std::vector<st::WriteTensor> t;
    add_nvfp4(t, "m.a", a);
    add_fp8(t, "m.b", b);
    t.push_back(st::make_bf16("m.c.weight", {8, 32}, dense));
    t.push_back(st::make_bf16("lm_head.weight", {8, 32}, dense));
    return t;
  }
};

std::unique_ptr<ModeloptTensor> load(const Checkpoint& c, const std::string& prefix, std::vector<int64_t> shape = {}) {
  return std::make_unique<ModeloptTensor>(group_of(c, prefix, std::move(shape)));
}

}  // namespace

TEST(Nvfp4Encodings, E2M1AndEveryE4M3CodeMatchTheWrittenOutRules) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1(uint8_t(c)), float(kE2M1[c])) << c;
  for (int c = 0; c < 256; ++c) {
    const double want = ref_e4m3(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(e4m3(uint8_t(c)))) << c;
      EXPECT_FALSE(e4m3_is_valid_scale(uint8_t(c))) << c;
    } else {
      EXPECT_EQ(double(e4m3(uint8_t(c))), want) << c;
      EXPECT_EQ(e4m3_is_valid_scale(uint8_t(c)), c < 0x80 || c == 0x80) << c;
    }
  }
  EXPECT_EQ(ref_e4m3(0x7E), 448.0);  // the spec's maximum
  EXPECT_EQ(ref_e4m3(0x01), std::ldexp(1.0, -9));
}

TEST(Nvfp4Tensor, DequantizesExactlyAndMultipliesBatchInvariantly) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  auto ckpt = open_modelopt(folder(d, "m", f.tensors(), kPlainConfig, hf_quant("MIXED_PRECISION", R"(["lm_head", "m.c"])",
                                                                         R"(, "quantized_layers": {"m.a": {"quant_algo": "NVFP4", "group_size": 16}, "m.b": {"quant_algo": "FP8"}})")));
  auto a = load(*ckpt, "m.a", {24, 96});
  auto b = load(*ckpt, "m.b", {16, 64});
  EXPECT_EQ(a->type_name(), "NVFP4");
  EXPECT_EQ(b->type_name(), "FP8");
  EXPECT_EQ(a->bytes(), size_t(24 * 48 + 24 * 6));
  ASSERT_TRUE(a->layout().input_scale.has_value());
  EXPECT_EQ(*a->layout().input_scale, f.a.input_scale);
  for (auto [t, want] : {std::pair{a.get(), f.a.values()}, std::pair{b.get(), f.b.values()}}) {
    std::vector<float> got(want.size());
    t->dequantize(got.data());
    EXPECT_TRUE(same_bits(got.data(), want.data(), want.size())) << t->type_name();
    // The quantization is not trivial: values differ from a constant and use many codes.
    double sq = 0;
    for (float v : want) sq += double(v) * v;
    EXPECT_GT(sq, 0.0);

    const int64_t m = t->rows(), k = t->cols(), n = 7;
    std::vector<float> x = tandem::test::random_vec(size_t(n * k), 9), y(size_t(n * m), NAN);
    t->matmul(Tensor(x.data(), DType::F32, n, k), Tensor(y.data(), DType::F32, n, m));
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t o = 0; o < m; ++o) {
        double ref = 0, mag = 1e-30;
        for (int64_t j = 0; j < k; ++j) {
          ref += double(want[size_t(o * k + j)]) * x[size_t(i * k + j)];
          mag += std::abs(double(want[size_t(o * k + j)]) * x[size_t(i * k + j)]);
        }
        worst = std::max(worst, std::abs(y[size_t(i * m + o)] - ref) / mag);
      }
      // One row alone gives the same bits as inside the batch.
      std::vector<float> y1(size_t(m), NAN);
      t->matmul(Tensor(x.data() + i * k, DType::F32, 1, k), Tensor(y1.data(), DType::F32, 1, m));
      EXPECT_TRUE(same_bits(y1.data(), y.data() + i * m, size_t(m))) << t->type_name() << " row " << i;
    }
    EXPECT_LT(worst, 1e-6) << t->type_name();
    // get_rows gives the dequantized rows.
    const int32_t ids[3] = {int32_t(m - 1), 0, 3};
    std::vector<float> rows(size_t(3 * k));
    t->get_rows(ids, 3, Tensor(rows.data(), DType::F32, 3, k));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(rows.data() + i * k, want.data() + ids[i] * k, size_t(k)));
  }
}

TEST(Nvfp4Repack, GgufBlocksDecodeToTheSameValues) {
  TempDir d("tandem-nvfp4");
  Nvfp4Linear l = quantize_nvfp4(random_weights(5, 192, 4, 0.3), 5, 192);
  l.scales[3] = 0x80;  // −0: the repack strips the sign, value 0 either way
  std::vector<st::WriteTensor> t;
  add_nvfp4(t, "x", l);
  auto ckpt = open_modelopt(folder(d, "r", t, kPlainConfig, hf_quant("NVFP4")));
  const Layout lay = parse_group(group_of(*ckpt, "x"));
  const std::vector<uint8_t> blocks = repack_gguf_nvfp4(lay);
  ASSERT_EQ(blocks.size(), size_t(5 * 3 * 36));
  std::vector<float> g(5 * 192), want = l.values();
  gguf::dequantize_nvfp4(blocks.data(), g.data(), 5 * 192);
  // The GGUF `.scale` sidecar multiplies; values compare with == (E2M1's −0 is ggml's +0).
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i] * l.scale2, want[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(want[size_t(48 + i)], 0.0f);

  // K not a multiple of 64 is named.
  Nvfp4Linear odd = quantize_nvfp4(random_weights(2, 48, 5, 0.3), 2, 48);
  std::vector<st::WriteTensor> t2;
  add_nvfp4(t2, "odd", odd);
  auto c2 = open_modelopt(folder(d, "o", t2, kPlainConfig, hf_quant("NVFP4")));
  const Layout lo = parse_group(group_of(*c2, "odd"));
  expect_error([&] { repack_gguf_nvfp4(lo); }, {"odd.weight", "48", "64"});

  // FP8 codes widen to BF16 exactly.
  Fp8Linear f = quantize_fp8(random_weights(3, 32, 6, 1.0), 3, 32);
  std::vector<st::WriteTensor> t3;
  add_fp8(t3, "f", f);
  auto c3 = open_modelopt(folder(d, "f", t3, kPlainConfig, hf_quant("FP8")));
  const std::vector<uint16_t> bf = fp8_to_bf16(parse_group(group_of(*c3, "f")));
  for (size_t i = 0; i < bf.size(); ++i) {
    uint32_t bits = uint32_t(bf[i]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    EXPECT_EQ(double(v), ref_e4m3(f.q[i])) << i;
  }
}

TEST(Nvfp4Config, BothFormsAndWildcardExcludes) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  // Legacy hf_quant_config.json.
  const std::string legacy = folder(d, "legacy", f.tensors(), kPlainConfig,
                                    hf_quant("MIXED_PRECISION", R"(["lm_*", "m.?"])",
                                             R"(, "quantized_layers": {"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}})"));
  EXPECT_EQ(probe_modelopt_path(legacy), 110);
  EXPECT_EQ(probe_modelopt_path(legacy + "/model.safetensors"), 110);
  auto q = read_quant_config(legacy);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->quant_algo, "MIXED_PRECISION");
  EXPECT_EQ(q->kv_cache_quant_algo, "FP8");
  EXPECT_EQ(q->excluded_by("lm_head"), "lm_*");
  EXPECT_EQ(q->excluded_by("m.c"), "m.?");
  EXPECT_EQ(q->excluded_by("m.c.inner"), "m.?");  // a parent module's pattern covers its children
  EXPECT_EQ(q->excluded_by("m.a"), "m.?");
  EXPECT_EQ(q->excluded_by("mm.ab"), "");
  // m.a is NVFP4 but matched by 'm.?': excluded yet quantized.
  expect_error([&] { open_modelopt(legacy); }, {"hf_quant_config.json", "'m.a'", "m.?", "NVFP4", "model.safetensors"});

  // config.json quantization_config, with ignore and exclude_modules both read, '*' crossing dots.
  const std::string qc = R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
      "exclude_modules": ["*.c"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"type": "float", "num_bits": 4, "group_size": 16}}},
      "quantized_layers": {"m.a": {"quant_algo": "NVFP4", "group_size": 16}, "m.b": {"quant_algo": "FP8"}}, "kv_cache_scheme": null})";
  const std::string modern = folder(d, "modern", f.tensors(), config_with(qc));
  EXPECT_EQ(probe_modelopt_path(modern), 110);
  auto ckpt = open_modelopt(modern);
  EXPECT_NE(ckpt->dump().find("1 NVFP4, 1 FP8 and 2 dense"), std::string::npos) << ckpt->dump();
  auto q2 = read_quant_config(modern);
  EXPECT_EQ(q2->exclude.size(), 2u);
  EXPECT_EQ(q2->kv_cache_quant_algo, "");
  EXPECT_EQ(q2->excluded_by("m.c"), "*.c");

  // A plain folder is not ModelOpt; its config.json quantization_config of another method neither.
  EXPECT_EQ(probe_modelopt_path(folder(d, "plain", f.tensors(), kPlainConfig)), 0);
  EXPECT_EQ(probe_modelopt_path(folder(d, "exl3", f.tensors(), config_with(R"({"quant_method": "exl3"})"))), 0);

  // Uniform NVFP4: the FP8 module is refused, and a config that lists nothing excluded refuses none dense.
  expect_error([&] { open_modelopt(folder(d, "uni", f.tensors(), kPlainConfig, hf_quant("NVFP4"))); },
               {"hf_quant_config.json", "quant_algo NVFP4", "'m.b'", "FP8"});
  std::vector<st::WriteTensor> only_a;
  add_nvfp4(only_a, "m.a", f.a);
  only_a.push_back(st::make_bf16("m.c.weight", {8, 32}, f.dense));
  EXPECT_NO_THROW(open_modelopt(folder(d, "uni2", only_a, kPlainConfig, hf_quant("W4A16_NVFP4"))));
}

TEST(Nvfp4Config, MixedPrecisionMapIsHeldToTheTensors) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  auto mixed = [&](const std::string& layers) {
    return hf_quant("MIXED_PRECISION", R"(["lm_head", "m.c"])", R"(, "quantized_layers": )" + layers);
  };
  EXPECT_NO_THROW(open_modelopt(folder(d, "ok", f.tensors(), kPlainConfig,
                                       mixed(R"({"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}, "mtp.x": {"quant_algo": "FP8"}})"))));
  expect_error([&] { open_modelopt(folder(d, "swap", f.tensors(), kPlainConfig,
                                          mixed(R"({"m.a": {"quant_algo": "FP8"}, "m.b": {"quant_algo": "FP8"}})"))); },
               {"hf_quant_config.json", "lists module 'm.a' as FP8", "stored as NVFP4", "m.a.weight"});
  expect_error([&] { open_modelopt(folder(d, "absent", f.tensors(), kPlainConfig, mixed(R"({"m.a": {"quant_algo": "NVFP4"}})"))); },
               {"hf_quant_config.json", "'m.b'", "FP8", "does not list it"});
  // A module listed as quantized but stored dense.
  std::vector<st::WriteTensor> t = f.tensors();
  t.push_back(st::make_bf16("m.d.weight", {8, 32}, f.dense));
  expect_error([&] { open_modelopt(folder(d, "dense", t, kPlainConfig,
                                          mixed(R"({"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}, "m.d": {"quant_algo": "NVFP4"}})"))); },
               {"lists module 'm.d' as NVFP4", "dense", "m.d.weight"});
}

TEST(Nvfp4Config, UnknownOrMalformedConfigsAreOneLineErrors) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  const auto t = f.tensors();
  expect_error([&] { open_modelopt(folder(d, "a", t, kPlainConfig, hf_quant("INT4_AWQ"))); },
               {"hf_quant_config.json", "quant_algo 'INT4_AWQ'"});
  expect_error([&] { open_modelopt(folder(d, "b", t, config_with(R"({"quant_method": "modelopt", "quant_algo": "NVFP8"})"))); },
               {"config.json", "quantization_config", "quant_algo 'NVFP8'"});
  expect_error([&] { open_modelopt(folder(d, "c", t, kPlainConfig, hf_quant("MIXED_PRECISION", "[]", R"(, "quantized_layers": {"m.a": {"quant_algo": "MXFP8"}})"))); },
               {"hf_quant_config.json", "quantized_layers['m.a']", "quant_algo 'MXFP8'"});
  expect_error([&] { open_modelopt(folder(d, "e", t, kPlainConfig, R"({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})")); },
               {"hf_quant_config.json", "group_size is 32"});
  expect_error([&] { open_modelopt(folder(d, "f", t, kPlainConfig, R"({"quantization": {"group_size": 16}})")); },
               {"hf_quant_config.json", "'quant_algo' is missing"});
  expect_error([&] { open_modelopt(folder(d, "g", t, kPlainConfig, "{not json")); }, {"hf_quant_config.json", "not valid JSON"});
  expect_error([&] { open_modelopt(folder(d, "h", t, kPlainConfig, hf_quant("MIXED_PRECISION"))); },
               {"hf_quant_config.json", "quantized_layers"});
}

TEST(Nvfp4Checkpoint, ShardedFolderIsReadThroughItsIndex) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  auto t = f.tensors();
  const std::string dir = d.file("sharded");
  std::filesystem::create_directories(dir);
  write_text(dir + "/config.json", config_with(R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
      "ignore": ["lm_head", "m.c"], "quantized_layers": {"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}}})"));
  // The NVFP4 weight in one shard, its scales in the other.
  std::vector<st::WriteTensor> s1(t.begin(), t.begin() + 1), s2(t.begin() + 1, t.end());
  st::write_file(dir + "/model-00001-of-00002.safetensors", s1);
  st::write_file(dir + "/model-00002-of-00002.safetensors", s2);
  std::vector<std::pair<std::string, std::string>> map;
  for (const auto& x : s1) map.push_back({x.name, "model-00001-of-00002.safetensors"});
  for (const auto& x : s2) map.push_back({x.name, "model-00002-of-00002.safetensors"});
  st::write_index(dir + "/model.safetensors.index.json", map);
  EXPECT_EQ(probe_modelopt_path(dir), 110);
  EXPECT_EQ(probe_modelopt_path(dir + "/model.safetensors.index.json"), 110);
  auto ckpt = open_modelopt(dir);
  auto a = load(*ckpt, "m.a");
  std::vector<float> got(24 * 96), want = f.a.values();
  a->dequantize(got.data());
  EXPECT_TRUE(same_bits(got.data(), want.data(), got.size()));
  EXPECT_NE(a->layout().file.find("00001"), std::string::npos);
}

// Found reading the reader while fuzz_nvfp4 was written (docs/fuzzing.md): an empty weight of 2^40 rows
// sized its per-row scales to terabytes (an out-of-memory), names or config values holding a newline
// broke the one-line error, and a deeply nested config overflowed the stack when freed.
TEST(Nvfp4Tensor, HostileShapesAndNamesAreOneLineErrors) {
  TempDir d("tandem-nvfp4");
  const int64_t huge = int64_t(1) << 40;
  {
    std::vector<st::WriteTensor> t = {{"m.a.weight", "U8", {huge, 0}, {}},
                                      {"m.a.weight_scale", "F8_E4M3", {huge, 0}, {}},
                                      st::make_f32("m.a.weight_scale_2", {}, {0.5f}),
                                      {"m.b.weight", "F8_E4M3", {huge, 0}, {}},
                                      st::make_f32("m.b.weight_scale", {}, {0.5f})};
    auto c = open_modelopt(folder(d, "empty", t, kPlainConfig, hf_quant("MIXED_PRECISION", "[]",
        R"(, "quantized_layers": {"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}})")));
    expect_error([&] { load(*c, "m.a"); }, {"'m.a.weight'", "U8 weight has shape [1099511627776, 0]", "non-empty"});
    expect_error([&] { load(*c, "m.b"); }, {"'m.b.weight'", "F8_E4M3 weight has shape [1099511627776, 0]"});
  }
  Fixture f;
  auto t = f.tensors();
  for (auto& x : t)
    if (x.name.rfind("m.a.", 0) == 0) x.name.insert(1, "\n");
  expect_error([&] { open_modelopt(folder(d, "name", t, kPlainConfig, hf_quant("FP8"))); },
               {"quant_algo FP8", "module 'm?.a' is stored as NVFP4", "'m?.a.weight'"});
  expect_error([&] { open_modelopt(folder(d, "algo", f.tensors(), kPlainConfig, hf_quant("NV\\u000aFP4"))); },
               {"quant_algo 'NV?FP4' is not one"});
  // A million nested lists: RapidJSON frees them recursively, which overflowed the stack.
  const std::string deep = R"({"quantization": {"quant_algo": "NVFP4", "x": )" + std::string(1000000, '[') +
                           std::string(1000000, ']') + "}}";
  expect_error([&] { open_modelopt(folder(d, "deep", f.tensors(), kPlainConfig, deep)); },
               {"hf_quant_config.json", "nests deeper than 64 levels"});
}

TEST(Nvfp4Tensor, MalformedGroupsNameTheFileAndTensor) {
  TempDir d("tandem-nvfp4");
  Fixture f;
  auto with = [&](const std::string& name, const std::function<void(std::vector<st::WriteTensor>&)>& edit) {
    auto t = f.tensors();
    edit(t);
    return open_modelopt(folder(d, name, t, kPlainConfig, hf_quant("MIXED_PRECISION", R"(["lm_head", "m.c"])",
                                                                  R"(, "quantized_layers": {"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}})")));
  };
  auto drop = [](std::vector<st::WriteTensor>& t, const std::string& name) {
    t.erase(std::remove_if(t.begin(), t.end(), [&](const st::WriteTensor& x) { return x.name == name; }), t.end());
  };
  auto find = [](std::vector<st::WriteTensor>& t, const std::string& name) -> st::WriteTensor& {
    for (auto& x : t)
      if (x.name == name) return x;
    throw std::runtime_error("no " + name);
  };
  {
    auto c = with("noscale", [&](auto& t) { drop(t, "m.a.weight_scale"); });
    expect_error([&] { load(*c, "m.a"); }, {"model.safetensors", "'m.a.weight_scale' is missing", "m.a.weight"});
  }
  {
    auto c = with("noscale2", [&](auto& t) { drop(t, "m.a.weight_scale_2"); });
    expect_error([&] { load(*c, "m.a"); }, {"model.safetensors", "'m.a.weight_scale_2' is missing"});
  }
  {
    auto c = with("shape", [&](auto& t) {
      auto& s = find(t, "m.a.weight_scale");
      s.shape = {24 * 6 / 2, 2};
    });
    expect_error([&] { load(*c, "m.a"); }, {"model.safetensors", "'m.a.weight_scale'", "F8_E4M3 [24, 6]", "[72, 2]"});
  }
  {
    auto c = with("dtype", [&](auto& t) {
      auto& s = find(t, "m.a.weight_scale");
      s.dtype = "U8";
    });
    expect_error([&] { load(*c, "m.a"); }, {"'m.a.weight_scale'", "expected F8_E4M3", "found U8"});
  }
  {
    auto c = with("negative", [&](auto& t) { find(t, "m.a.weight_scale").data[7] = 0xB8; });
    expect_error([&] { load(*c, "m.a"); }, {"model.safetensors", "'m.a.weight_scale'", "block scale 7", "negative"});
  }
  {
    auto c = with("nan", [&](auto& t) { find(t, "m.a.weight_scale").data[30] = 0x7F; });
    expect_error([&] { load(*c, "m.a"); }, {"'m.a.weight_scale'", "block scale 30", "row 5", "NaN"});
  }
  {
    auto c = with("scale2", [&](auto& t) {
      auto& s = find(t, "m.a.weight_scale_2");
      s.shape = {1, 1, 1};
      const float inf = INFINITY;
      std::memcpy(s.data.data(), &inf, 4);
    });
    expect_error([&] { load(*c, "m.a"); }, {"'m.a.weight_scale_2'", "finite"});
  }
  {
    auto c = with("fp8nan", [&](auto& t) { find(t, "m.b.weight").data[65] = 0xFF; });
    expect_error([&] { load(*c, "m.b"); }, {"'m.b.weight'", "row 1, column 1", "NaN"});
  }
  {
    auto c = with("fp8scale", [&](auto& t) { drop(t, "m.b.weight_scale"); });
    expect_error([&] { load(*c, "m.b"); }, {"'m.b.weight_scale' is missing"});
  }
  {
    auto c = with("fp8block", [&](auto& t) {
      auto& s = find(t, "m.b.weight_scale");
      s.shape = {2, 2};
      s.data.resize(16);
    });
    expect_error([&] { load(*c, "m.b"); }, {"'m.b.weight_scale'", "FP8_PB_WO"});
  }
  auto c = with("ok", [](auto&) {});
  expect_error([&] { load(*c, "m.a", {24, 48}); }, {"model.safetensors", "'m.a.weight'", "[24, 96]", "expects [24, 48]"});
  expect_error([&] { load(*c, "m.b", {64, 16}); }, {"'m.b.weight'", "expects [64, 16]"});
  // FP8 per-row scales are read.
  {
    auto pr = with("perrow", [&](auto& t) {
      auto& s = find(t, "m.b.weight_scale");
      std::vector<float> rows(16);
      for (int r = 0; r < 16; ++r) rows[size_t(r)] = f.b.scale * float(r + 1);
      s = bytes_tensor("m.b.weight_scale", "F32", {16}, rows.data(), 64);
    });
    auto b = load(*pr, "m.b");
    std::vector<float> got(16 * 64);
    b->dequantize(got.data());
    for (int64_t i = 0; i < 16 * 64; ++i)
      ASSERT_EQ(got[size_t(i)], float(ref_e4m3(f.b.q[size_t(i)]) * double(f.b.scale * float(i / 64 + 1)))) << i;
  }
}

TEST(Nvfp4Plugin, Nvfp4AndSafetensorsSplitTheGroupsByDtype) {
  PluginRegistry reg;
  reg.load_directory(tandem::test::plugin_dir());
  auto nv = reg.format("nvfp4", "cpu");
  auto sf = reg.format("safetensors", "cpu");
  TempDir d("tandem-nvfp4");
  Fixture f;
  const std::string dir = folder(d, "p", f.tensors(), kPlainConfig, hf_quant("MIXED_PRECISION", R"(["lm_head", "m.c"])",
                                                                             R"(, "quantized_layers": {"m.a": {"quant_algo": "NVFP4"}, "m.b": {"quant_algo": "FP8"}})"));
  EXPECT_GT(nv->probe_path(dir), sf->probe_path(dir));
  auto ckpt = nv->open(dir);
  int best = 0;
  std::string winner;
  for (const char* m : {"m.a", "m.b", "m.c", "lm_head"}) {
    const TensorGroup g = group_of(*ckpt, m);
    best = 0;
    for (const auto& [name, fmt] : reg.formats("cpu")) {
      const int s = fmt->probe_group(g);
      if (s > best) best = s, winner = name;
    }
    EXPECT_EQ(winner, std::string(m).rfind("m.a", 0) == 0 || std::string(m) == "m.b" ? "nvfp4" : "safetensors") << m;
  }
  EXPECT_EQ(nv->probe_group(group_of(*ckpt, "m.a")), 40);
  EXPECT_EQ(sf->probe_group(group_of(*ckpt, "m.a")), 0);
  EXPECT_EQ(nv->probe_group(group_of(*ckpt, "m.c")), 0);
  auto be = reg.backend("cpu");
  EXPECT_EQ(nv->load(group_of(*ckpt, "m.a"), *be)->type_name(), "NVFP4");
}
