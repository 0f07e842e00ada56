// The argument checks at the top of forward(), shared by the CPU and CUDA Mamba2 mixers so that both
// reject the same inputs with the same message.
// Owner: n/a. Thread: any. Sync: none (host checks).
#pragma once
#include <cstdint>

#include "tandem/error.h"
#include "tandem/layer.h"

namespace tandem::mamba2 {

inline void check_activation(const Tensor& t, const char* what, int n, int hidden) {
  check(t.dtype == DType::F32, "mamba2 forward: ", what, " must be f32, found ", dtype_name(t.dtype));
  check(t.rows == n && t.cols == hidden, "mamba2 forward: ", what, " is [", t.rows, ", ", t.cols, "], expected [", n,
        ", ", hidden, "]");
}

// x and out are [info.n, hidden] f32; the pass starts at the state's committed length.
inline void check_forward(const Tensor& x, const Tensor& out, const ForwardInfo& info, int hidden, int64_t committed) {
  check(info.n >= 0, "mamba2 forward: info.n must be >= 0, found ", info.n);
  check_activation(x, "input x", info.n, hidden);
  check_activation(out, "output", info.n, hidden);
  check(info.pos0 == committed, "mamba2 forward: info.pos0 is ", info.pos0, " but the state holds ", committed,
        " committed tokens");
}

}  // namespace tandem::mamba2
