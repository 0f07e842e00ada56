// The LiLiCorr tests that run beside a target model on TANDEM_LILICORR_DEVICE ("cpu", or "cuda" when a
// test file is built again as a *_cuda binary): a fixture that skips (or, with TANDEM_REQUIRE_GPU,
// fails) without that backend, and the tiny latent fixture target loaded there.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gpu_required.h"
#include "tandem/model.h"
#include "tandem/parallel.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

#ifndef TANDEM_LILICORR_DEVICE
#define TANDEM_LILICORR_DEVICE "cpu"
#endif

namespace tandem::test {

class OnLilicorrDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TANDEM_LILICORR_DEVICE) == "cpu") return;
    std::string cause;
    try {
      registry().backend(TANDEM_LILICORR_DEVICE);
      return;
    } catch (const std::exception& e) {
      cause = std::string("no ") + TANDEM_LILICORR_DEVICE + " backend here: " + e.what();
    }
    TANDEM_GPU_UNAVAILABLE(cause);
  }
};

inline std::unique_ptr<Model> load_lilicorr_target() {
  LoadOptions o;
  o.path = data_path("hf/latent");
  o.device = TANDEM_LILICORR_DEVICE;
  auto m = Model::load(o, registry());
  set_thread_count(1);
  return m;
}

}  // namespace tandem::test
