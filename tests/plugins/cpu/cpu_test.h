// Helpers for the CPU backend tests: NaN-poisoned outputs and the message of an expected error.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::test {

// An output buffer full of NaN, so that an element the kernel forgets to write fails the comparison.
inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, NAN); }

// The message of the tandem::Error that fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sets the pool size for one scope, then restores the default (all cores).
struct ThreadCount {
  explicit ThreadCount(int n) { set_thread_count(n); }
  ~ThreadCount() { set_thread_count(0); }
};

}  // namespace tandem::test
