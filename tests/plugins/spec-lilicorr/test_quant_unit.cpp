// NVFP4 drafter modules at the reader (plugins/spec-lilicorr/quant.*): ModelOpt's bytes decoded to the
// values by hand, slices keeping the NVFP4 form, excludes honored at the folder, and malformed inputs
// (missing weight_scale / weight_scale_2, a misshapen scale, a U8 weight without a config, an unknown
// quant_algo) refused in one line naming the tensor and the key.
#include <gtest/gtest.h>

#include <fstream>

#include "checkpoint.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "quant.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

// A module of 2 rows × 16 inputs: row 0 starts 0x21 (0.5, 1.0), row 1 starts 0x9F (−6, −0.5); block
// scales 0x38 (1.0) and 0x40 (2.0); weight_scale_2 0.25.
struct Module {
  std::vector<uint8_t> q = std::vector<uint8_t>(16, 0), s = {0x38, 0x40};
  float s2 = 0.25f;
  Module() { q[0] = 0x21, q[8] = 0x9F; }
  std::vector<RawTensor> raws(const std::string& m, bool scale = true, bool scale2 = true,
                              std::vector<int64_t> scale_shape = {2, 1}) const {
    std::vector<RawTensor> r;
    r.push_back({m + ".weight", "U8", {2, 8}, q.data(), q.size(), "x.safetensors"});
    if (scale) r.push_back({m + ".weight_scale", "F8_E4M3", scale_shape, s.data(), s.size(), "x.safetensors"});
    if (scale2)
      r.push_back({m + ".weight_scale_2", "F32", {}, reinterpret_cast<const uint8_t*>(&s2), 4, "x.safetensors"});
    return r;
  }
};

DrafterQuant modelopt(const std::string& algo = "NVFP4") {
  DrafterQuant q;
  q.kind = DrafterQuant::Kind::Modelopt;
  q.file = "hf_quant_config.json";
  nvfp4::QuantConfig c;
  c.file = q.file, c.quant_algo = algo;
  q.modelopt = c;
  return q;
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST(LilicorrQuantReader, ModeloptBytesDecodeToTheirValues) {
  const Module m;
  const std::vector<ReadTensor> t = read_quantized(m.raws("layers.0.mlp.up_proj"), modelopt());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].stored, "layers.0.mlp.up_proj.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{2, 16}));
  ASSERT_TRUE(t[0].nvfp4);
  EXPECT_EQ(t[0].nvfp4->scale2, 0.25f);
  std::vector<float> want(32, 0.0f);
  want[0] = 0.5f * 1.0f * 0.25f, want[1] = 1.0f * 1.0f * 0.25f;
  want[16] = -6.0f * 2.0f * 0.25f, want[17] = -0.5f * 2.0f * 0.25f;
  EXPECT_EQ(t[0].data, want);
  // Row slices keep the stored form; column slices on the 16-input groups too, off them none.
  const auto r1 = t[0].nvfp4->rows(1, 1);
  EXPECT_EQ(r1->dequantize(), std::vector<float>(want.begin() + 16, want.end()));
  EXPECT_TRUE(t[0].nvfp4->cols(0, 16));
  EXPECT_FALSE(t[0].nvfp4->cols(8, 8));
}

TEST(LilicorrQuantReader, MalformedModulesNameTensorAndKey) {
  const Module m;
  const std::string up = "layers.0.mlp.up_proj";
  test::expect_error([&] { read_quantized(m.raws(up, false), modelopt()); },
                     {"layers.0.mlp.up_proj.weight_scale' is missing", "quant_algo NVFP4", "hf_quant_config.json"});
  test::expect_error([&] { read_quantized(m.raws(up, true, false), modelopt()); },
                     {"layers.0.mlp.up_proj.weight_scale_2' is missing", "F32"});
  test::expect_error([&] { read_quantized(m.raws(up, true, true, {1, 2}), modelopt()); },
                     {"layers.0.mlp.up_proj.weight_scale'", "[1, 2]", "expected F8_E4M3 [2, 1]", "quant_algo NVFP4"});
  test::expect_error([&] { read_quantized(m.raws(up), DrafterQuant{}); },
                     {"layers.0.mlp.up_proj.weight'", "U8", "no ModelOpt quantization config"});
  // A scale with no quantized weight.
  std::vector<RawTensor> lone = m.raws(up);
  lone.erase(lone.begin());
  test::expect_error([&] { read_quantized(lone, modelopt()); },
                     {"layers.0.mlp.up_proj.weight_scale", "quantization scale", "no quantized weight"});
}

TEST(LilicorrQuantReader, UnknownQuantAlgoIsRefusedByName) {
  test::TempDir dir("lilicorr-q");
  const std::string p = dir.file("fp8");
  std::filesystem::create_directories(p);
  write_file(p + "/config.json", "{}");
  write_file(p + "/hf_quant_config.json",
             "{\"quantization\": {\"quant_algo\": \"INT4_AWQ\", \"group_size\": 128, \"exclude_modules\": []}}");
  test::expect_error([&] { read_quant(p, "{}"); }, {"hf_quant_config.json", "INT4_AWQ"});
  write_file(p + "/hf_quant_config.json",
             "{\"quantization\": {\"quant_algo\": \"FP8\", \"exclude_modules\": []}}");
  test::expect_error([&] { read_quant(p, "{}"); }, {"hf_quant_config.json", "FP8", "NVFP4 only"});
  write_file(p + "/hf_quant_config.json",
             "{\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 32, \"exclude_modules\": []}}");
  test::expect_error([&] { read_quant(p, "{}"); }, {"hf_quant_config.json", "group_size"});
}

TEST(LilicorrQuantReader, ExcludedModulesStayDenseAndMustBeStoredSo) {
  test::TempDir dir("lilicorr-q");
  const Module m;
  const std::vector<uint16_t> fc(2 * 16, 0x3F80);  // BF16 1.0
  auto folder = [&](const std::string& name, bool fc_quantized) {
    const std::string p = dir.file(name);
    std::filesystem::create_directories(p);
    write_file(p + "/config.json", "{}");
    write_file(p + "/hf_quant_config.json",
               "{\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16, \"exclude_modules\": "
               "[\"fc\", \"lm_head\"]}}");
    std::vector<RawTensor> raws = m.raws("layers.0.mlp.up_proj");
    if (fc_quantized) {
      for (RawTensor& r : m.raws("fc")) raws.push_back(r);
    } else {
      raws.push_back({"fc.weight", "BF16", {2, 16}, reinterpret_cast<const uint8_t*>(fc.data()), 64, ""});
    }
    std::vector<TensorSpec> info;
    for (const RawTensor& r : raws) info.push_back({r.name, r.dtype, r.shape});
    safetensors::SafetensorsWriter w;
    auto f = w.create(p + "/model.safetensors", info, FileInfo{});
    for (const RawTensor& r : raws) f->write(r.data, r.nbytes);
    f->close();
    return p;
  };
  const TensorMap t = read_tensors(folder("ok", false));
  ASSERT_TRUE(t.count("fc.weight") && t.count("layers.0.mlp.up_proj.weight"));
  EXPECT_FALSE(t.at("fc.weight").nvfp4);
  EXPECT_EQ(t.at("fc.weight").data, std::vector<float>(32, 1.0f));
  EXPECT_TRUE(t.at("layers.0.mlp.up_proj.weight").nvfp4);
  test::expect_error([&] { read_tensors(folder("bad", true)); }, {"hf_quant_config.json", "fc"});
}
