// ModeloptTensor: ModelOpt NVFP4 and FP8 linears on the CPU (nvfp4_cpu.h).
#include "formats/nvfp4/nvfp4_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/nvfp4/encodings.h"
#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::nvfp4 {
namespace {

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string where(const RawTensor& t) { return "nvfp4: '" + t.file + "': tensor '" + printable(t.name) + "'"; }

const RawTensor& need(const TensorGroup& g, const RawTensor& weight, const char* suffix, const char* what) {
  const RawTensor* t = g.member(suffix);
  if (!t)
    fail("nvfp4: '", weight.file, "': tensor '", printable(g.prefix), ".", suffix, "' is missing (", weight.dtype,
         " weight '", printable(weight.name), "' ", shape_str(weight.shape), " needs ", what, ")");
  return *t;
}

float scalar_f32(const RawTensor& t) {
  if (t.dtype != "F32" || numel(t.shape) != 1 || t.nbytes != 4)
    fail(where(t), ": expected one F32 value, found ", t.dtype, " ", shape_str(t.shape));
  float v;
  std::memcpy(&v, t.data, 4);
  if (!std::isfinite(v)) fail(where(t), ": the scale is ", v, ", expected a finite value");
  return v;
}

// Σ a[k]·b[k] in 8 lanes, combined in a fixed order: the same bits for any caller.
float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[k + j] * b[k + j];
  for (; k < n; ++k) s[k & 7] += a[k] * b[k];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

}  // namespace

int probe_modelopt_group(const TensorGroup& group) {
  const RawTensor* w = group.member("weight");
  if (!w) return 0;
  if (w->dtype == "U8") return group.member("weight_scale") || group.member("weight_scale_2") ? 40 : 0;
  return w->dtype == "F8_E4M3" ? 40 : 0;
}

Layout parse_group(const TensorGroup& g) {
  const RawTensor* wp = g.member("weight");
  if (!wp) fail("nvfp4: group ", g.describe(), " has no 'weight' tensor");
  const RawTensor& w = *wp;
  Layout l;
  l.name = g.prefix;
  l.file = w.file;
  if (w.shape.size() != 2) fail(where(w), ": ", w.dtype, " weight has shape ", shape_str(w.shape), ", expected 2-D");
  l.out = w.shape[0];
  // An empty weight is refused: only a non-empty one bounds its dimensions by the file's bytes ([2^40, 0]
  // holds none, yet would size the per-row scales to terabytes, and [0, 2^62]'s inputs overflow).
  if (w.shape[0] <= 0 || w.shape[1] <= 0)
    fail(where(w), ": ", w.dtype, " weight has shape ", shape_str(w.shape), ", expected a non-empty matrix");
  if (w.dtype == "U8") {
    l.storage = Storage::NVFP4;
    l.in = 2 * w.shape[1];
    if (l.in % kGroup != 0)
      fail(where(w), ": U8 [", l.out, ", ", w.shape[1], "] packs ", l.in, " inputs per row, not a multiple of ", kGroup);
    const RawTensor& s = need(g, w, "weight_scale", "its F8_E4M3 block scales");
    const std::vector<int64_t> want = {l.out, l.in / kGroup};
    if (s.dtype != "F8_E4M3" || s.shape != want)
      fail(where(s), ": expected F8_E4M3 ", shape_str(want), " (one scale per ", kGroup, " inputs of the ", l.out,
           "×", l.in, " weight in '", w.file, "'), found ", s.dtype, " ", shape_str(s.shape));
    for (int64_t i = 0, n = numel(want); i < n; ++i)
      if (!e4m3_is_valid_scale(s.data[i]))
        fail(where(s), ": block scale ", i, " (row ", i / want[1], ", inputs ", i % want[1] * kGroup, "…) is ",
             e4m3_is_nan(s.data[i]) ? "NaN" : "negative", " (byte 0x", std::hex, int(s.data[i]), std::dec,
             "), expected a non-negative E4M3 value");
    l.scales = s.data;
    l.global_scale = scalar_f32(need(g, w, "weight_scale_2", "its F32 per-tensor scale 'weight_scale_2'"));
    l.out_scale.assign(size_t(l.out), l.global_scale);
    l.bytes = w.nbytes + s.nbytes;
  } else if (w.dtype == "F8_E4M3") {
    l.storage = Storage::FP8;
    l.in = w.shape[1];
    for (int64_t i = 0, n = l.out * l.in; i < n; ++i)
      if (e4m3_is_nan(w.data[i]))
        fail(where(w), ": weight (row ", i / l.in, ", column ", i % l.in, ") is NaN (byte 0x", std::hex, int(w.data[i]),
             std::dec, ")");
    const RawTensor& s = need(g, w, "weight_scale", "its F32 'weight_scale'");
    const int64_t n = numel(s.shape);
    const bool row_shape = s.shape == std::vector<int64_t>{l.out} || s.shape == std::vector<int64_t>{l.out, 1};
    if (s.dtype != "F32" || (n != 1 && !row_shape))
      fail(where(s), ": expected F32 scalar or [", l.out, "] (FP8 weight ", shape_str(w.shape), " in '", w.file,
           "'), found ", s.dtype, " ", shape_str(s.shape), " (block-scaled FP8_PB_WO is not read)");
    l.out_scale.resize(size_t(l.out));
    if (n == 1 && l.out != 1) {
      l.global_scale = scalar_f32(s);
      l.out_scale.assign(size_t(l.out), l.global_scale);
    } else {
      l.per_row = true;
      std::memcpy(l.out_scale.data(), s.data, size_t(l.out) * 4);
      for (int64_t r = 0; r < l.out; ++r)
        if (!std::isfinite(l.out_scale[size_t(r)]))
          fail(where(s), ": scale of row ", r, " is ", l.out_scale[size_t(r)], ", expected a finite value");
    }
    l.bytes = w.nbytes + s.nbytes;
  } else {
    fail(where(w), ": weight is ", w.dtype, ", expected U8 (NVFP4) or F8_E4M3 (FP8)");
  }
  const size_t want_bytes = size_t(l.out) * size_t(l.storage == Storage::NVFP4 ? l.in / 2 : l.in);
  if (w.nbytes != want_bytes) fail(where(w), ": holds ", w.nbytes, " bytes, its shape needs ", want_bytes);
  l.q = w.data;
  if (const RawTensor* is = g.member("input_scale")) l.input_scale = scalar_f32(*is);
  if (!g.shape.empty() && g.shape != std::vector<int64_t>{l.out, l.in})
    fail(where(w), ": ", storage_name(l.storage), " weight ", w.dtype, " ", shape_str(w.shape), " holds a [", l.out,
         ", ", l.in, "] matrix, the model expects ", shape_str(g.shape));
  return l;
}

void decode_row(const Layout& l, int64_t r, float* out) {
  if (l.storage == Storage::FP8) {
    const uint8_t* q = l.q + r * l.in;
    for (int64_t k = 0; k < l.in; ++k) out[k] = e4m3(q[k]);
    return;
  }
  const uint8_t* q = l.q + r * (l.in / 2);
  const uint8_t* s = l.scales + r * (l.in / kGroup);
  for (int64_t b = 0; b < l.in / kGroup; ++b) {
    const float d = e4m3(s[b]);
    for (int j = 0; j < kGroup / 2; ++j) {
      const uint8_t byte = q[b * (kGroup / 2) + j];
      out[b * kGroup + 2 * j] = e2m1(byte & 0xF) * d;
      out[b * kGroup + 2 * j + 1] = e2m1(byte >> 4) * d;
    }
  }
}

ModeloptTensor::ModeloptTensor(const TensorGroup& group) : l_(parse_group(group)) { shape_ = {l_.out, l_.in}; }

std::string ModeloptTensor::type_name() const { return storage_name(l_.storage); }

void ModeloptTensor::matmul_raw(const Tensor& x, const Tensor& y) const {
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t n = x.rows, m = l_.out, k = l_.in;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, k * std::min<int64_t>(n, 16)));
  parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      decode_row(l_, r, row.data());
      const float s = l_.out_scale[size_t(r)];
      for (int64_t i = 0; i < n; ++i) ys[i * m + r] = dot(row.data(), xs + i * k, k) * s;
    }
  });
}

void ModeloptTensor::get_rows(const int32_t* ids, int n, const Tensor& out) const {
  check(out.dtype == DType::F32 && out.rows == n && out.cols == l_.in, "get_rows: tensor '", l_.name, "': output is ",
        dtype_name(out.dtype), " [", out.rows, ", ", out.cols, "], expected f32 [", n, ", ", l_.in, "]");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= l_.out)
      fail("get_rows: tensor '", l_.name, "': id ", ids[i], " at position ", i, " is outside [0, ", l_.out, ")");
  parallel_for(n, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dst = out.row(p);
      decode_row(l_, ids[p], dst);
      const float s = l_.out_scale[size_t(ids[p])];
      for (int64_t k = 0; k < l_.in; ++k) dst[k] *= s;
    }
  });
}

void ModeloptTensor::dequantize(float* out_host) const {
  parallel_for(l_.out, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = out_host + r * l_.in;
      decode_row(l_, r, dst);
      const float s = l_.out_scale[size_t(r)];
      for (int64_t k = 0; k < l_.in; ++k) dst[k] *= s;
    }
  });
}

}  // namespace tandem::nvfp4
