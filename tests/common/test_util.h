// Helpers shared by tests: fixture paths, deterministic random data, float64 comparisons.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace tandem::test {

// TANDEM_TEST_DATA_DIR / TANDEM_TEST_BINARY_DIR override the configured paths, so that a build tree
// copied to another machine (the GPU box) runs its tests from the copy.
inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
inline std::string data_path(const std::string& rel) { return env_or("TANDEM_TEST_DATA_DIR", TANDEM_TEST_DATA) + "/" + rel; }
// ../shared/data beside the checkout (real vocabularies, chat templates); CI has the same copy.
inline std::string shared_data(const std::string& rel) { return std::string(TANDEM_SHARED_DATA) + "/" + rel; }
inline std::string plugin_dir() { return env_or("TANDEM_TEST_BINARY_DIR", TANDEM_BINARY_DIR) + "/lib/tandem/plugins"; }

inline std::vector<float> random_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |a - b| over elements
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace tandem::test
