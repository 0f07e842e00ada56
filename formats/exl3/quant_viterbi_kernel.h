// The Viterbi pass over the 2^16-state bitshift trellis, as a header so that it compiles once per
// instruction set (quant_viterbi.cpp: baseline; quant_viterbi_avx2.cpp: -mavx2). Include only there,
// inside a namespace of its own, after <cstdint> and <cstring>.
// Path costs are non-negative floats, so their bit patterns order like the floats; the low K mantissa
// bits carry the predecessor's high symbol, and one integer min per group gives both the min and the
// argmin (the costs lose K of 23 mantissa bits, which only moves ties).
template <int K>
void viterbi_pass_k(const float* vals, const float* x, int t0, int start_ov, int end_ov, uint16_t* states,
                    float* cost, uint32_t* gm, uint8_t* bt) {
  constexpr int G = 1 << (16 - K), B = 1 << K;
  constexpr uint32_t kIdx = uint32_t(B - 1);
  constexpr float kInf = 1e30f;
  {
    const float x0 = x[t0];
    for (int s = 0; s < 65536; ++s) {
      float d = vals[s] - x0;
      cost[s] = d * d;
    }
    if (start_ov >= 0)
      for (int s = 0; s < 65536; ++s)
        if ((s >> K) != start_ov) cost[s] = kInf;
  }
  for (int t = t0 + 1; t < 256; ++t) {
    // Predecessors of state s: hi·G + (s >> K) for hi in 0..B−1, so group g = s >> K takes the min
    // of cost[hi·G + g] over hi.
    for (int g = 0; g < G; ++g) {
      uint32_t c;
      std::memcpy(&c, cost + g, 4);
      gm[g] = c & ~kIdx;
    }
    for (int hi = 1; hi < B; ++hi) {
      const float* row = cost + hi * G;
      for (int g = 0; g < G; ++g) {
        uint32_t c;
        std::memcpy(&c, row + g, 4);
        c = (c & ~kIdx) | uint32_t(hi);
        gm[g] = c < gm[g] ? c : gm[g];
      }
    }
    uint8_t* b = bt + size_t(t) * G;
    for (int g = 0; g < G; ++g) b[g] = uint8_t(gm[g] & kIdx);
    const float xt = x[t];
    for (int g = 0; g < G; ++g) {
      uint32_t mb = gm[g] & ~kIdx;
      float m;
      std::memcpy(&m, &mb, 4);
      for (int j = 0; j < B; ++j) {
        float d = vals[g * B + j] - xt;
        cost[g * B + j] = d * d + m;
      }
    }
  }
  // The best final state (with its low 16 − K bits fixed to end_ov when asked), then back.
  int best = -1;
  float bc = 0;
  if (end_ov >= 0) {
    for (int hi = 0; hi < B; ++hi) {
      int s = hi * G + end_ov;
      if (best < 0 || cost[s] < bc) best = s, bc = cost[s];
    }
  } else {
    for (int s = 0; s < 65536; ++s)
      if (best < 0 || cost[s] < bc) best = s, bc = cost[s];
  }
  int s = best;
  states[255] = uint16_t(s);
  for (int t = 255; t > t0; --t) {
    int g = s >> K;
    s = int(bt[size_t(t) * G + g]) * G + g;
    states[t - 1] = uint16_t(s);
  }
}

inline void viterbi_pass(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov,
                         uint16_t* states, float* cost, uint32_t* gm, uint8_t* bt) {
  switch (K) {
    case 1: return viterbi_pass_k<1>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 2: return viterbi_pass_k<2>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 3: return viterbi_pass_k<3>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 4: return viterbi_pass_k<4>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 5: return viterbi_pass_k<5>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 6: return viterbi_pass_k<6>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    case 7: return viterbi_pass_k<7>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
    default: return viterbi_pass_k<8>(vals, x, t0, start_ov, end_ov, states, cost, gm, bt);
  }
}
