// Bad checkpoints: each is a one-line error that names the tensor or file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "formats/safetensors/safetensors_writer.h"
#include "model_util.h"
#include "tandem/error.h"
#include "tandem/weights.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

// The latent fixture rewritten with `edit` applied to its tensor list.
template <class Edit>
fs::path variant(const std::string& tag, Edit edit) {
  fs::path dir = fs::temp_directory_path() / ("tandem_bad_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(test::data_path("hf/latent/config.json"), dir / "config.json", fs::copy_options::overwrite_existing);
  auto ck = test::registry().format("safetensors")->open(test::data_path("hf/latent"));
  std::vector<safetensors::WriteTensor> ts;
  for (const RawTensor& t : ck->tensors()) ts.push_back({t.name, t.dtype, t.shape, {t.data, t.data + t.nbytes}});
  edit(ts);
  safetensors::write_file((dir / "model.safetensors").string(), ts);
  return dir;
}

std::string load_error(const fs::path& dir) {
  try {
    test::load_model(dir.string());
  } catch (const Error& e) {
    fs::remove_all(dir);
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  fs::remove_all(dir);
  return "(no error)";
}

}  // namespace

TEST(BadCheckpoint, MissingTensor) {
  auto dir = variant("missing", [](auto& ts) {
    std::erase_if(ts, [](const auto& t) { return t.name == "backbone.layers.3.mixer.k_proj.weight"; });
  });
  std::string m = load_error(dir);
  EXPECT_NE(m.find("missing tensor 'backbone.layers.3.mixer.k_proj'"), std::string::npos) << m;
}

TEST(BadCheckpoint, WrongShape) {
  auto dir = variant("shape", [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "backbone.layers.1.mixer.experts.2.up_proj.weight") {
        t.shape = {t.shape[1], t.shape[0]};  // transposed: same bytes, wrong shape
      }
  });
  std::string m = load_error(dir);
  EXPECT_NE(m.find("tensor 'backbone.layers.1.mixer.experts.2.up_proj': expected shape [32, 24], found [24, 32]"),
            std::string::npos)
      << m;
}

TEST(BadCheckpoint, TruncatedFile) {
  auto dir = variant("trunc", [](auto&) {});
  fs::path f = dir / "model.safetensors";
  fs::resize_file(f, fs::file_size(f) - 1000);
  std::string m = load_error(dir);
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
}

TEST(BadCheckpoint, MissingConfig) {
  auto dir = variant("noconfig", [](auto&) {});
  fs::remove(dir / "config.json");
  std::string m = load_error(dir);
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
}

TEST(BadCheckpoint, MissingPath) {
  std::string m = load_error("/nonexistent/model-dir");
  EXPECT_NE(m.find("'/nonexistent/model-dir' does not exist"), std::string::npos) << m;
}
