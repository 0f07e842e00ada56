// The Viterbi pass for the baseline instruction set (quant_viterbi_kernel.h).
#include "formats/exl3/quant_viterbi.h"

#include <cstdint>
#include <cstring>

namespace tandem::exl3::detail {
namespace base {
#include "formats/exl3/quant_viterbi_kernel.h"
}  // namespace base

void viterbi_pass_base(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov,
                       uint16_t* states, float* cost, uint32_t* gm, uint8_t* bt) {
  base::viterbi_pass(vals, x, t0, K, start_ov, end_ov, states, cost, gm, bt);
}

}  // namespace tandem::exl3::detail
