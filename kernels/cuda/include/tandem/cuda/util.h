// Host-side helpers shared by every CUDA module (backend, formats, layers), free of CUDA headers so
// that plain C++ (plugin entry points, tests) can call them.
// Owner: n/a. Thread: any. Sync: none.
#pragma once

namespace tandem::cuda {

// CUDA devices visible to this process; 0 when there is no driver or no device (CI), never throws.
int device_count();

// Score for a module's tandem_plugin_score export: 0 without a device (the registry then skips it).
inline int plugin_score() { return device_count() > 0 ? 10 : 0; }

}  // namespace tandem::cuda
