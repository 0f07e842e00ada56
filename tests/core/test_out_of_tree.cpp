// A format added without touching the core: tests/out_of_tree/toyfmt is configured and built here
// against this build's TandemConfig.cmake, and the engine loads a checkpoint through it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "formats/safetensors/safetensors_writer.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/weights.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

// Copies the HF fixture, storing every Mamba out_proj as toyfmt int8 rows (`quantized`) or as the
// same values dequantized to F32 (the reference).
void write_variant(const Checkpoint& src, const fs::path& dir, bool quantized) {
  fs::create_directories(dir);
  fs::copy_file(test::data_path("hf/latent/config.json"), dir / "config.json", fs::copy_options::overwrite_existing);
  std::vector<safetensors::WriteTensor> out;
  for (const RawTensor& t : src.tensors()) {
    bool target = t.name.size() > 20 && t.name.rfind("mixer.out_proj.weight") == t.name.size() - 21;
    if (!target) {
      out.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
      continue;
    }
    ASSERT_EQ(t.dtype, "BF16");
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<int8_t> q(static_cast<size_t>(rows * cols));
    std::vector<float> scale(static_cast<size_t>(rows)), deq(static_cast<size_t>(rows * cols));
    const uint16_t* w = reinterpret_cast<const uint16_t*>(t.data);
    for (int64_t r = 0; r < rows; ++r) {
      float m = 0;
      for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(bf16_to_f32(w[r * cols + c])));
      scale[size_t(r)] = m > 0 ? m / 127.f : 1.f;
      for (int64_t c = 0; c < cols; ++c) {
        q[size_t(r * cols + c)] = int8_t(std::lround(bf16_to_f32(w[r * cols + c]) / scale[size_t(r)]));
        deq[size_t(r * cols + c)] = float(q[size_t(r * cols + c)]) * scale[size_t(r)];
      }
    }
    if (quantized) {
      out.push_back({t.name, "I8", t.shape, std::vector<uint8_t>(q.size())});
      std::memcpy(out.back().data.data(), q.data(), q.size());
      std::string base = t.name.substr(0, t.name.size() - 7);  // drop ".weight"
      out.push_back(safetensors::make_f32(base + ".scale", {rows}, scale));
    } else {
      out.push_back(safetensors::make_f32(t.name, t.shape, deq));
    }
  }
  safetensors::write_file((dir / "model.safetensors").string(), out);
}

std::vector<float> logits_of(const std::string& path, PluginRegistry& reg, const std::vector<int32_t>& toks) {
  LoadOptions o;
  o.path = path;
  auto m = Model::load(o, reg);
  auto seq = m->new_sequence(64);
  std::vector<float> l;
  m->forward(*seq, toks, ForwardMode::Prefill, l, true);
  return l;
}

}  // namespace

TEST(OutOfTree, FormatPluginBuiltSeparatelyLoadsACheckpoint) {
  const std::string bin = std::string(TANDEM_BINARY_DIR), src = std::string(TANDEM_SOURCE_DIR);
  const std::string oot = bin + "/oot-toyfmt";
  std::string cfg = std::string("\"") + TANDEM_CMAKE_COMMAND + "\" -S \"" + src + "/tests/out_of_tree/toyfmt\" -B \"" +
                    oot + "\" -G \"" + TANDEM_CMAKE_GENERATOR + "\" -DCMAKE_BUILD_TYPE=Release -DTandem_DIR=\"" + bin +
                    "\" > \"" + oot + ".log\" 2>&1";
  std::string build = std::string("\"") + TANDEM_CMAKE_COMMAND + "\" --build \"" + oot + "\" >> \"" + oot + ".log\" 2>&1";
  ASSERT_EQ(std::system(cfg.c_str()), 0) << "configure failed, see " << oot << ".log";
  ASSERT_EQ(std::system(build.c_str()), 0) << "build failed, see " << oot << ".log";
  const std::string plugin = oot + "/plugins/libtandem-toyfmt.so";
  ASSERT_TRUE(fs::exists(plugin));

  fs::path tmp = fs::temp_directory_path() / ("tandem_oot_" + std::to_string(::getpid()));
  PluginRegistry base;
  base.load_directory(test::plugin_dir());
  auto src_ckpt = base.format("safetensors")->open(test::data_path("hf/latent"));
  write_variant(*src_ckpt, tmp / "toy", true);
  write_variant(*src_ckpt, tmp / "ref", false);
  const std::vector<int32_t> toks = {5, 17, 200, 3, 99, 42, 7};

  // Without the plugin: the int8 groups are claimed by nobody, and the error names one.
  try {
    LoadOptions o;
    o.path = (tmp / "toy").string();
    Model::load(o, base);
    ADD_FAILURE() << "loaded without the toyfmt plugin";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no format plugin claims tensor group 'backbone.layers.0.mixer.out_proj'"), std::string::npos) << m;
    EXPECT_NE(m.find("weight: I8"), std::string::npos) << m;
  }

  // With it, through TANDEM_PLUGIN_PATH as a user would add it.
  setenv("TANDEM_PLUGIN_PATH", (oot + "/plugins").c_str(), 1);
  PluginRegistry with;
  with.load_default();
  unsetenv("TANDEM_PLUGIN_PATH");
  std::vector<float> toy = logits_of((tmp / "toy").string(), with, toks);
  std::vector<float> ref = logits_of((tmp / "ref").string(), base, toks);
  ASSERT_EQ(toy.size(), ref.size());
  double maxabs = 0;
  for (float v : ref) maxabs = std::max(maxabs, double(std::fabs(v)));
  EXPECT_LE(test::max_abs_diff(toy, ref), 1e-4 * maxabs);
  fs::remove_all(tmp);
}
