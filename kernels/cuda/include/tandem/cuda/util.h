// Host-side helpers shared by every CUDA module (backend, formats, layers), free of CUDA headers so
// that plain C++ (plugin entry points, tests) can call them.
// Owner: n/a. Thread: any. Sync: none.
#pragma once

#include <cstdint>

namespace tandem::cuda {

// Grouped expert gathers (the GGUF prefill GEMM's, the dense tensor-core one): gathers of at least
// this many items — more than a verify pass of 16 tokens × 32 experts has — over at most this many
// experts (the gather plan's shared-memory table, tandem/cuda/gather_plan.cuh) take the grouped GEMM;
// decode and verify keep the GEMVs and their bits.
constexpr int64_t kGroupedGatherMinItems = 16 * 32 + 1;
constexpr int kGroupedGatherMaxExperts = 2048;

// CUDA devices visible to this process; 0 when there is no driver or no device (CI), never throws.
int device_count();

// Score for a module's tandem_plugin_score export: 0 without a device (the registry then skips it).
inline int plugin_score() { return device_count() > 0 ? 10 : 0; }

// The kernel choice of the BF16/F16 tensor-core matmul (kernels/cuda/dense_tc.cuh): every variant
// computes the same contract, so it changes time, never bits. The process starts with
// TANDEM_DENSE_TC_VARIANT (read once; unset: the default) and the bench and tests switch it between
// calls; set_dense_tc_variant throws tandem::Error naming an unknown variant. Not for concurrent use
// with matmuls on other threads (a launch reads it once).
int dense_tc_variant_count();
const char* dense_tc_variant_name(int i);  // nullptr outside [0, dense_tc_variant_count())
const char* dense_tc_variant();            // the current one
void set_dense_tc_variant(const char* name);

// The BF16/F16 grouped expert gather on the tensor cores (on by default: 13.8× the SIMT gather's
// prefill on nano bf16, docs/benchmarks.md): TANDEM_CUDA_DENSE_GROUPED=0 at start turns it off, or
// tests and the bench set it for the process between calls (kernels/cuda/dense_tc.cuh).
bool dense_grouped_gather();
void set_dense_grouped_gather(bool on);

}  // namespace tandem::cuda
