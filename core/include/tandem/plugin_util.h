// Helpers for writing plugins: C-ABI factory functions that build a C++ object and turn exceptions
// into a status plus message. Owner: the caller of create owns the object until destroy.
// Thread: any. Sync: none.
#pragma once
#include <cstdio>
#include <exception>
#include <new>

#include "tandem/plugin_abi.h"

namespace tandem {

inline void write_error(char* err, size_t len, const char* msg) {
  if (err && len) std::snprintf(err, len, "%s", msg);
}

// create/destroy pair for an interface I implemented by T (default-constructible).
template <class I, class T>
struct Factory {
  static int create(void** out, char* err, size_t len) {
    try {
      *out = static_cast<I*>(new T());
      return TANDEM_OK;
    } catch (const std::exception& e) {
      write_error(err, len, e.what());
    } catch (...) {
      write_error(err, len, "unknown error");
    }
    return TANDEM_ERROR;
  }
  static void destroy(void* p) { delete static_cast<I*>(p); }
};

}  // namespace tandem
