// The bytes of synthetic tensors, row by row. A row depends only on (stream, row), never on how rows
// are chunked or which thread makes them, so writers can stream and loaders can share pools. Block
// types get random quants and block scales from the plan's Writer (Writer::random_blocks), set so that
// the weight's values have the plan's standard deviation.
// Owner: callers own the output memory. Thread: any (Writers calibrate their types once, locked).
// Sync: none.
#pragma once
#include <cstdint>

#include "synth_plan.h"

namespace tandem::synth {

// Rows [r0, r1) of `t` (a tensor of `plan`) into out, (r1 − r0)·row_bytes bytes. `stream` selects the
// random numbers: a file uses one per tensor, a shared pool one per pool.
void generate_rows(const Plan& plan, const StoredTensor& t, uint64_t stream, int64_t r0, int64_t r1, uint8_t* out);

// The same over the core's worker threads.
void generate_rows_parallel(const Plan& plan, const StoredTensor& t, uint64_t stream, int64_t r0, int64_t r1,
                            uint8_t* out);

// A well-mixed 64-bit id from a seed and a number (a tensor's index, a pool's key).
uint64_t stream_id(uint64_t seed, uint64_t n);

}  // namespace tandem::synth
