// Random bytes from the core's Rng, for synthetic weights and quantized blocks (apps/synth and the
// format writers draw the same streams, so the same seed gives the same files).
// Owner: free function. Thread: any (the Rng is the caller's). Sync: none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tandem/backend.h"

namespace tandem {

// n bytes of Rng::next() words, little-endian, the last word cut short.
inline void random_bytes(Rng& r, uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

}  // namespace tandem
