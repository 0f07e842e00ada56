// A shared worker pool for host-side kernels (CPU backend, CPU format kernels, Mamba2 CPU scan).
// Owner: the core owns one process-wide pool. Thread: parallel_for may be called from one thread at a
// time (nested calls run inline). Sync: returns when every index has run.
#pragma once
#include <cstdint>
#include <functional>

#include "tandem/plugin_abi.h"

namespace tandem {

// Runs fn(begin, end) over [0, n) split into contiguous ranges of at least `grain` indices.
// Which thread runs an index never changes what it computes: kernels keep each output's
// arithmetic independent of the split.
TANDEM_API void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// 0 = hardware concurrency.
TANDEM_API void set_thread_count(int n);
TANDEM_API int thread_count();

}  // namespace tandem
