// The Viterbi pass compiled with -mavx2 (quant_viterbi_kernel.h); called only when the CPU has AVX2.
#include "formats/exl3/quant_viterbi.h"

#include <cstdint>
#include <cstring>

namespace tandem::exl3::detail {
namespace avx2 {
#include "formats/exl3/quant_viterbi_kernel.h"
}  // namespace avx2

void viterbi_pass_avx2(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov,
                       uint16_t* states, float* cost, uint32_t* gm, uint8_t* bt) {
  avx2::viterbi_pass(vals, x, t0, K, start_ov, end_ov, states, cost, gm, bt);
}

}  // namespace tandem::exl3::detail
