// What every fuzz target shares: the rule for a rejected input (a one-line tandem::Error; anything
// else — another exception, a sanitizer report, a multi-line message — stops the fuzzer as a bug), and
// the load path a weight reader's tensors take: grouped, probed, loaded, dequantized, multiplied.
// Owner: n/a. Thread: the fuzzer's. Sync: none.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "device_only_backend.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/weights.h"

namespace tandem::fuzz {

// Runs one input. A tandem::Error is a clean rejection when its message is one non-empty line;
// other exceptions are left to escape, which libFuzzer reports as a crash (std::terminate).
template <class F>
int run_one(F&& f) {
  try {
    f();
  } catch (const tandem::Error& e) {
    const char* what = e.what();
    if (*what == '\0' || std::strchr(what, '\n') != nullptr) {
      std::fprintf(stderr, "fuzz: a rejection must be one line, got: [%s]\n", what);
      std::abort();
    }
    // Replaying a seed or an input by hand: TANDEM_FUZZ_VERBOSE=1 says why it was rejected.
    static const bool verbose = std::getenv("TANDEM_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "fuzz: rejected: %s\n", what);
  }
  return 0;
}

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// Splits the input at its first NUL: the part before, and the part after (empty without a NUL). Targets
// that read two texts (a template and its variables) take them this way.
inline std::pair<std::string, std::string> split_at_nul(const uint8_t* data, size_t size) {
  const std::string s = text_of(data, size);
  const size_t nul = s.find('\0');
  if (nul == std::string::npos) return {s, ""};
  return {s.substr(0, nul), s.substr(nul + 1)};
}

// Everything the model loader does with a weight reader's tensors: each group of tensors that share a
// prefix (name up to its last '.') is offered to `format`; a claimed group is loaded for the CPU,
// dequantized, and (a matrix) multiplied by two rows. Only device() of the backend is asked.
inline void load_all(const std::vector<RawTensor>& tensors, const WeightFormat& format) {
  std::map<std::string, TensorGroup> groups;
  for (const RawTensor& t : tensors) {
    const size_t dot = t.name.rfind('.');
    const std::string prefix = dot == std::string::npos ? t.name : t.name.substr(0, dot);
    TensorGroup& g = groups[prefix];
    g.prefix = prefix;
    g.members.push_back(&t);
  }
  test::DeviceOnlyBackend cpu("cpu");
  for (auto& [prefix, g] : groups) {
    if (format.probe_group(g) == 0) continue;
    auto q = format.load(g, cpu);
    int64_t numel = 1;
    for (int64_t d : q->shape()) numel *= d;
    std::vector<float> out(static_cast<size_t>(numel));
    q->dequantize(out.data());
    if (q->shape().size() == 2 && numel > 0) {
      std::vector<float> x(size_t(2 * q->cols()), 0.5f), y(size_t(2 * q->rows()));
      q->matmul(Tensor::f32(x.data(), 2, q->cols()), Tensor::f32(y.data(), 2, q->rows()));
    }
  }
}

}  // namespace tandem::fuzz
