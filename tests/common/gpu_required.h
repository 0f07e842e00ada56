// What a GPU test does when it cannot run (no device, a CUDA error at start-up, a device plugin that
// did not load): skip, or with TANDEM_REQUIRE_GPU=1 in the environment (the GPU machine's CI) fail,
// naming the cause, so that a broken driver or plugin cannot show green there.
// Owner: none (pure functions and macros). Thread: the test's. Sync: none.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tandem::test {

// TANDEM_REQUIRE_GPU as given (nullptr: unset) → whether GPU tests must run.
inline bool gpu_required(const char* value) { return value && std::string(value) == "1"; }
inline bool gpu_required() { return gpu_required(std::getenv("TANDEM_REQUIRE_GPU")); }

struct GpuVerdict {
  bool fail = false;
  std::string message;
};

// The verdict for a GPU test that cannot run because of `cause`.
inline GpuVerdict gpu_unavailable_verdict(const std::string& cause, bool required) {
  if (required) return {true, "GPU test cannot run (TANDEM_REQUIRE_GPU=1): " + cause};
  return {false, cause + " (skipped; TANDEM_REQUIRE_GPU=1 makes this a failure)"};
}

}  // namespace tandem::test

// Ends the current test (or SetUp) as skipped, or as failed under TANDEM_REQUIRE_GPU=1.
#define TANDEM_GPU_UNAVAILABLE(cause)                                                                    \
  do {                                                                                                   \
    const ::tandem::test::GpuVerdict tandem_verdict_ =                                                   \
        ::tandem::test::gpu_unavailable_verdict((cause), ::tandem::test::gpu_required());                \
    if (tandem_verdict_.fail) GTEST_FAIL() << tandem_verdict_.message;                                   \
    GTEST_SKIP() << tandem_verdict_.message;                                                             \
  } while (0)
