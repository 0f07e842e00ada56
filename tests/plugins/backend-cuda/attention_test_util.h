// Inputs and the CPU reference for the CUDA attention tests (test_cuda_attention.cpp,
// test_cuda_attention_prefill.cpp): random q for `rows` rows at pos0, random k/v cache rows
// [0, pos0 + rows), and plugins/cpu's attention of those rows.
// Owner: the caller owns the vectors. Thread: any. Sync: none.
#pragma once
#include <cmath>
#include <vector>

#include "plugins/cpu/kernels.h"
#include "test_util.h"

namespace tandem::test {

struct Shape {
  int nq, nkv, hd;
};

struct AttentionInputs {
  std::vector<float> q, k, v;  // q [rows, nq·hd]; k, v [pos0 + rows, nkv·hd]
  std::vector<float> want;     // the CPU's output [rows, nq·hd]
};

// A row's CPU result depends only on its own q and the cache rows before it, so the reference of a
// pass of max rows serves every shorter pass at the same pos0.
inline AttentionInputs attention_inputs(Shape s, int64_t pos0, int64_t rows, uint64_t seed, float q_range = 1.5f) {
  const int64_t cap = pos0 + rows, qw = int64_t(s.nq) * s.hd, kw = int64_t(s.nkv) * s.hd;
  AttentionInputs in{random_vec(size_t(rows * qw), seed, -q_range, q_range),
                     random_vec(size_t(cap * kw), seed + 1, -1.5f, 1.5f), random_vec(size_t(cap * kw), seed + 2, -1.f, 1.f),
                     std::vector<float>(size_t(rows * qw), NAN)};
  std::vector<float> kc(in.k), vc(in.v);
  cpu::attention(Tensor::f32(in.q.data(), rows, qw), Tensor::f32(in.k.data() + pos0 * kw, rows, kw),
                 Tensor::f32(in.v.data() + pos0 * kw, rows, kw), kc.data(), vc.data(), cap, pos0, s.nq, s.nkv, s.hd,
                 Tensor::f32(in.want.data(), rows, qw));
  return in;
}

}  // namespace tandem::test
