// A Backend that only answers device(), for the formats' device rule: loading a tensor group must
// ask the backend which device it is and touch nothing else (every other method throws). Not final:
// a test may answer one more method (tests/model/test_detached_memory.cpp: alloc).
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::test {

class DeviceOnlyBackend : public Backend {
 public:
  explicit DeviceOnlyBackend(std::string device) : device_(std::move(device)) {}
  std::string device() const override { return device_; }
  std::unique_ptr<Buffer> alloc(size_t) override { fail("test backend: alloc"); }
  void upload(void*, const void*, size_t) override { fail("test backend: upload"); }
  void download(void*, const void*, size_t) override { fail("test backend: download"); }
  void rms_norm(const Tensor&, const float*, float, const Tensor&) override { fail("test backend"); }
  void gated_rms_norm(const Tensor&, const Tensor&, const float*, int, float, const Tensor&) override {
    fail("test backend");
  }
  void add(const Tensor&, const Tensor&, const Tensor&) override { fail("test backend"); }
  void relu2(const Tensor&) override { fail("test backend"); }
  void attention(const Tensor&, const Tensor&, const Tensor&, float*, float*, int64_t, int64_t, int, int, int,
                 const Tensor&) override {
    fail("test backend");
  }
  void moe_route(const Tensor&, const float*, const RouteParams&, int32_t*, float*) override { fail("test backend"); }
  int32_t sample(const float*, int64_t, const SamplingParams&, Rng&) override { fail("test backend"); }

 private:
  std::string device_;
};

}  // namespace tandem::test
