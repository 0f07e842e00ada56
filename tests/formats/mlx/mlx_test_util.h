// Shared by the MLX round-trip tests (CPU and CUDA): the converter host of `tandem convert --to mlx`,
// which opens its GGUF input itself and needs no calibration.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "tandem/converter.h"
#include "tandem/error.h"
#include "tandem/registry.h"

namespace tandem::test {

class NoCalibrationHost final : public ConvertHost {
 public:
  explicit NoCalibrationHost(PluginRegistry& reg) : reg_(reg) {}
  PluginRegistry& registry() override { return reg_; }
  const Checkpoint& input() override { fail("the mlx converter opens its input itself"); }
  Calibration calibrate(const std::string&, const std::set<std::string>&, int64_t, int64_t) override {
    fail("the mlx converter needs no calibration");
  }

 private:
  PluginRegistry& reg_;
};

}  // namespace tandem::test
