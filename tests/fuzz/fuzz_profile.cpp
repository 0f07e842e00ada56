// YAML profiles: the text of a configs/*.yaml through core/src/profile.cpp (yaml-cpp, then every key
// validated).
#include "fuzz_util.h"
#include "tandem/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] { tandem::parse_profile(tandem::fuzz::text_of(data, size), "/fuzz/profile.yaml"); });
}
