// `tandem serve` opens the profile's checkpoint once: the text codec reads its side files from the
// same Checkpoint the model loads from.
#include <gtest/gtest.h>

#include <atomic>

#include "http_server.h"
#include "tandem/registry.h"
#include "tandem/text/text_codec.h"
#include "tandem/weights.h"
#include "test_util.h"

namespace tandem {
namespace {

// A container that counts how often it is opened, reading through another format.
class CountingFormat final : public WeightFormat {
 public:
  explicit CountingFormat(std::shared_ptr<WeightFormat> inner) : inner_(std::move(inner)) {}
  int probe_path(const std::string& path) const override { return inner_->probe_path(path); }
  std::unique_ptr<Checkpoint> open(const std::string& path) const override {
    ++opens;
    return inner_->open(path);
  }
  int probe_group(const TensorGroup&) const override { return 0; }  // the inner format loads the weights
  std::unique_ptr<QuantizedTensor> load(const TensorGroup&, Backend&) const override { return nullptr; }
  mutable std::atomic<int> opens{0};

 private:
  std::shared_ptr<WeightFormat> inner_;
};

TEST(ServeLoad, OpensTheCheckpointOnce) {
  auto registry = std::make_shared<PluginRegistry>();
  registry->load_default();
  auto counting = std::make_shared<CountingFormat>(registry->format("safetensors"));
  registry->add_format("counting", counting);
  Profile p;
  p.load.path = test::data_path("hf/latent");
  p.load.format = "counting";
  server::LoadedModel m = server::load_profile_model(p, registry, {});
  ASSERT_TRUE(m.model && m.codec);
  EXPECT_EQ(m.model->format_name(), "counting");
  EXPECT_EQ(counting->opens.load(), 1);
}

}  // namespace
}  // namespace tandem
