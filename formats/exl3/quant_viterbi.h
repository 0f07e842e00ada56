// One Viterbi pass over the EXL3 trellis (internal to the quantizer), built per instruction set.
// Owner: the caller owns every buffer: cost 65536 floats, gm 2^(16−K) words, bt 256·2^(16−K) bytes.
// Thread: any, with buffers of its own. Sync: none.
#pragma once
#include <cstdint>

namespace tandem::exl3::detail {

// Positions t0..255 of target x. start_ov ≥ 0: the first state's high 16 − K bits (s >> K) must equal
// it; end_ov ≥ 0: the last state's low 16 − K bits must equal it. Writes states[t0..255].
void viterbi_pass_base(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov,
                       uint16_t* states, float* cost, uint32_t* gm, uint8_t* bt);
void viterbi_pass_avx2(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov,
                       uint16_t* states, float* cost, uint32_t* gm, uint8_t* bt);

}  // namespace tandem::exl3::detail
