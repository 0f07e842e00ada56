// Argument checks that every backend runs before an op touches memory, so that a bad tensor gets
// the same one-line error on every device.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem {

// "rms_norm: y: expected f32 [2, 8], found bf16 [2, 4]"
inline void check_tensor(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": ", name, ": expected f32 ", shape_str(std::vector<int64_t>{rows, cols}), ", found ",
         dtype_name(t.dtype), " ", shape_str(std::vector<int64_t>{t.rows, t.cols}));
  check(t.data || t.numel() == 0, op, ": ", name, ": data is null");
}

inline void check_ptr(const char* op, const char* name, const void* p) {
  check(p != nullptr, op, ": ", name, " is null");
}

// rope, rope_at, rope_table: x [rows, heads·hd] with hd even, from a position ≥ 0.
inline void check_rope(const char* op, const Tensor& x, int heads, int hd, int64_t pos0) {
  check(heads > 0 && hd > 0 && hd % 2 == 0, op, ": heads must be positive and head_dim even, found heads=", heads,
        " hd=", hd);
  check_tensor(op, "x", x, x.rows, int64_t(heads) * hd);
  check(pos0 >= 0, op, ": position ", pos0, " is negative");
}

// The LiLiCorr head's ops (Backend::mul_add_rows, attention_bias, attention_bias_qkv, add_rows, normalize_rows,
// group_dots).
inline void check_mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) {
  check(group >= 1 && x.rows % group == 0, "mul_add_rows: group ", group, " does not divide ", x.rows, " rows");
  check_tensor("mul_add_rows", "x", x, x.rows, x.cols);
  if (a.data) check_tensor("mul_add_rows", "a", a, x.rows / group, x.cols);
  if (b.data) check_tensor("mul_add_rows", "b", b, x.rows / group, x.cols);
  check_tensor("mul_add_rows", "out", out, x.rows, x.cols);
}

inline void check_attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads,
                                 int hd, const Tensor& out) {
  check(heads > 0 && hd > 0, "attention_bias: heads and head_dim must be positive, found heads=", heads, " hd=", hd);
  const int64_t n = q.rows, w = int64_t(heads) * hd;
  check_tensor("attention_bias", "q", q, n, w);
  check_tensor("attention_bias", "k", k, n, w);
  check_tensor("attention_bias", "v", v, n, w);
  check_tensor("attention_bias", "bias", bias, int64_t(heads) * n, n);
  check_tensor("attention_bias", "out", out, n, w);
}

inline void check_attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                                     const Tensor& out) {
  check(heads > 0 && hd > 0, "attention_bias_qkv: heads and head_dim must be positive, found heads=", heads, " hd=",
        hd);
  const int64_t n = qkv.rows, w = int64_t(heads) * hd;
  check_tensor("attention_bias_qkv", "qkv", qkv, n, 3 * w);
  if (qkv_bias.data) check_tensor("attention_bias_qkv", "qkv_bias", qkv_bias, 1, 3 * w);
  check_tensor("attention_bias_qkv", "bias", bias, int64_t(heads) * n, n);
  check_tensor("attention_bias_qkv", "out", out, n, w);
}

inline void check_add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb,
                           const Tensor& out) {
  check_tensor("add_rows", "x", x, x.rows, x.cols);
  if (d.data) check_tensor("add_rows", "d", d, x.rows, x.cols);
  // A broadcast operand: one row per `group` rows of x.
  auto broadcast = [&](const Tensor& t, int64_t group, const char* name) {
    if (!t.data) return;
    check(group >= 1 && x.rows % group == 0, "add_rows: group ", group, " of ", name, " does not divide ", x.rows,
          " rows");
    check_tensor("add_rows", name, t, x.rows / group, x.cols);
  };
  broadcast(a, ga, "a");
  broadcast(b, gb, "b");
  check_tensor("add_rows", "out", out, x.rows, x.cols);
}

inline void check_group_dots(const Tensor& a, const Tensor& b, int64_t groups, const Tensor& out) {
  check(groups >= 1 && a.rows % groups == 0 && b.rows % groups == 0 && a.rows > 0 && b.rows > 0,
        "group_dots: ", groups, " groups must divide a's ", a.rows, " and b's ", b.rows, " rows");
  check_tensor("group_dots", "a", a, a.rows, a.cols);
  check_tensor("group_dots", "b", b, b.rows, a.cols);
  check_tensor("group_dots", "out", out, groups, (a.rows / groups) * (b.rows / groups));
}

}  // namespace tandem
