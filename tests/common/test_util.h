// Helpers shared by tests: fixture paths, deterministic random data, float64 comparisons.
#pragma once
#include <cmath>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tandem/error.h"

namespace tandem::test {

// A fresh folder under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tandem") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Asserts that fn throws a one-line tandem::Error whose message holds every part.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tandem::Error, got: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected tandem::Error, nothing was thrown";
}


// TANDEM_TEST_DATA_DIR / TANDEM_TEST_BINARY_DIR override the configured paths, so that a build tree
// copied to another machine (the GPU box) runs its tests from the copy.
// A whole file's bytes; a file that cannot be opened throws, naming it.
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
inline std::string data_path(const std::string& rel) { return env_or("TANDEM_TEST_DATA_DIR", TANDEM_TEST_DATA) + "/" + rel; }
// ../shared/data beside the checkout (real vocabularies, chat templates); CI has the same copy.
inline std::string shared_data(const std::string& rel) { return std::string(TANDEM_SHARED_DATA) + "/" + rel; }
inline std::string plugin_dir() { return env_or("TANDEM_TEST_BINARY_DIR", TANDEM_BINARY_DIR) + "/lib/tandem/plugins"; }

// Whitespace-separated token ids from a string (tandem generate --print-ids output) or a file (a
// fixture's prompt); reading stops at the first thing that is not an integer.
inline std::vector<int32_t> ids_in(std::istream&& in) {
  std::vector<int32_t> ids;
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}
inline std::vector<int32_t> ids_in(const std::string& text) { return ids_in(std::istringstream(text)); }
inline std::vector<int32_t> read_ids(const std::string& path) { return ids_in(std::ifstream(path)); }

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
