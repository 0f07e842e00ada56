// CPU kernels for dense weights. The dot product keeps 16 fp32 lane accumulators, reduced in a fixed
// tree, so an output element's value depends only on its x row and weight row (batch invariance).
#include "dense_cpu.h"

#include <algorithm>
#include <cstring>

#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::safetensors {
namespace {

constexpr int kLanes = 16;        // independent accumulators per dot product
constexpr int kRowBlock = 4;      // x rows sharing one pass over a weight row
constexpr int64_t kRowTile = 16;  // x rows kept hot in cache while weight rows stream past

// IEEE binary16 bits → f32, exact (subnormals, inf, NaN payloads kept); inline, unlike the core's.
inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {
    bits = (em << 13) | 0x7f800000u;  // inf / NaN
  } else if (em >= 0x0400u) {
    bits = (em << 13) + ((127u - 15u) << 23);  // normal: rebias the exponent
  } else {
    float f = float(em) * 0x1p-24f;  // subnormal or zero: em · 2^-24 is exact in f32
    std::memcpy(&bits, &f, 4);
  }
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// GCC/Clang vector extensions at the target's native width (4 lanes on SSE2, 8 with AVX2): 16
// lanes are kVecs vectors. Each lane is plain IEEE fp32 arithmetic (contraction is off for this
// file), so every width computes the same bits.
#if defined(__AVX2__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
constexpr int kVecs = kLanes / kWidth;
typedef float Vf __attribute__((vector_size(kWidth * 4)));
typedef uint32_t Vu __attribute__((vector_size(kWidth * 4)));
typedef int32_t Vi __attribute__((vector_size(kWidth * 4)));
typedef uint16_t Vh __attribute__((vector_size(kWidth * 2)));

inline Vf bits_to_float(Vu u) {
  Vf f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline Vu load_u16(const uint16_t* p) {
  Vh h;
  std::memcpy(&h, p, sizeof(h));
  return __builtin_convertvector(h, Vu);
}

template <DenseType T>
struct Elem;
template <>
struct Elem<DenseType::F32> {
  using type = float;
  static float get(float v) { return v; }
  static Vf get_vec(const float* p) {
    Vf v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
};
template <>
struct Elem<DenseType::BF16> {
  using type = uint16_t;
  static float get(uint16_t v) { return bf16_to_f32(v); }
  static Vf get_vec(const uint16_t* p) { return bits_to_float(load_u16(p) << 16); }
};
template <>
struct Elem<DenseType::F16> {
  using type = uint16_t;
  static float get(uint16_t v) { return half_to_float(v); }
  // half_to_float lane by lane, with selects instead of branches.
  static Vf get_vec(const uint16_t* p) {
    Vu h = load_u16(p);
    Vu sign = (h & 0x8000u) << 16;
    Vu em = h & 0x7fffu;
    Vu normal = (em << 13) + ((127u - 15u) << 23);
    Vu special = (em << 13) | 0x7f800000u;
    Vf sub_f = __builtin_convertvector(Vi(em), Vf) * 0x1p-24f;
    Vu sub;
    std::memcpy(&sub, &sub_f, sizeof(sub));
    Vu r = em >= 0x7c00u ? special : (em >= 0x0400u ? normal : sub);
    return bits_to_float(r | sign);
  }
};

size_t elem_bytes(DenseType t) { return t == DenseType::F32 ? 4 : 2; }

// out[r] = x[r] · w for R rows of x. Row r's arithmetic is the same for every R: lane l sums
// elements j ≡ l (mod 16) in order, then the lanes are reduced pairwise.
template <DenseType T, int R>
void dot_rows(const float* const* x, const typename Elem<T>::type* w, int64_t k, float* out) {
  Vf acc[R][kVecs] = {};
  int64_t j = 0;
  for (; j + kLanes <= k; j += kLanes) {
    for (int v = 0; v < kVecs; ++v) {
      Vf wv = Elem<T>::get_vec(w + j + v * kWidth);
      for (int r = 0; r < R; ++r) {
        Vf xv;
        std::memcpy(&xv, x[r] + j + v * kWidth, sizeof(xv));
        acc[r][v] += xv * wv;
      }
    }
  }
  float lanes[R][kLanes];
  std::memcpy(lanes, acc, sizeof(lanes));
  for (int l = 0; j + l < k; ++l) {
    float wl = Elem<T>::get(w[j + l]);
    for (int r = 0; r < R; ++r) lanes[r][l] += x[r][j + l] * wl;
  }
  for (int r = 0; r < R; ++r) {
    for (int width = kLanes / 2; width >= 1; width /= 2)
      for (int l = 0; l < width; ++l) lanes[r][l] += lanes[r][l + width];
    out[r] = lanes[r][0];
  }
}

// y[i .. i+R, o] for one weight row.
template <DenseType T, int R>
void rows_at(const float* xs, float* ys, int64_t k, int64_t m, int64_t i, int64_t o, const typename Elem<T>::type* wr) {
  const float* xp[R];
  for (int r = 0; r < R; ++r) xp[r] = xs + (i + r) * k;
  float out[R];
  dot_rows<T, R>(xp, wr, k, out);
  for (int r = 0; r < R; ++r) ys[(i + r) * m + o] = out[r];
}

template <DenseType T>
void matmul_typed(const uint8_t* data, int64_t m, int64_t k, const Tensor& x, const Tensor& y) {
  using E = typename Elem<T>::type;
  const E* w = reinterpret_cast<const E*>(data);
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t n = x.rows;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, k * std::min(n, kRowTile)));
  parallel_for(m, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t t0 = 0; t0 < n; t0 += kRowTile) {
      const int64_t t1 = std::min(n, t0 + kRowTile);
      for (int64_t o = o0; o < o1; ++o) {
        const E* wr = w + o * k;
        int64_t i = t0;
        for (; i + kRowBlock <= t1; i += kRowBlock) rows_at<T, kRowBlock>(xs, ys, k, m, i, o, wr);
        switch (t1 - i) {
          case 3: rows_at<T, 3>(xs, ys, k, m, i, o, wr); break;
          case 2: rows_at<T, 2>(xs, ys, k, m, i, o, wr); break;
          case 1: rows_at<T, 1>(xs, ys, k, m, i, o, wr); break;
          default: break;
        }
      }
    }
  });
}

template <DenseType T>
void convert(const uint8_t* data, int64_t begin, int64_t count, float* out) {
  const auto* src = reinterpret_cast<const typename Elem<T>::type*>(data) + begin;
  for (int64_t i = 0; i < count; ++i) out[i] = Elem<T>::get(src[i]);
}

void convert_any(DenseType t, const uint8_t* data, int64_t begin, int64_t count, float* out) {
  switch (t) {
    case DenseType::BF16: return convert<DenseType::BF16>(data, begin, count, out);
    case DenseType::F16: return convert<DenseType::F16>(data, begin, count, out);
    case DenseType::F32: return convert<DenseType::F32>(data, begin, count, out);
  }
}

}  // namespace

bool is_dense_dtype(const std::string& dtype) { return dtype == "BF16" || dtype == "F16" || dtype == "F32"; }

DenseTensor::DenseTensor(const RawTensor& raw) : name_(raw.name) {
  check(is_dense_dtype(raw.dtype), "safetensors: tensor '", raw.name, "': dtype ", raw.dtype,
        " is not dense, expected BF16, F16 or F32");
  type_ = raw.dtype == "BF16" ? DenseType::BF16 : raw.dtype == "F16" ? DenseType::F16 : DenseType::F32;
  shape_ = raw.shape;
  numel_ = 1;
  for (int64_t d : shape_) numel_ *= d;
  nbytes_ = size_t(numel_) * elem_bytes(type_);
  check(raw.nbytes == nbytes_, "safetensors: tensor '", raw.name, "': shape ", shape_str(shape_), " of ", raw.dtype,
        " needs ", nbytes_, " bytes, found ", raw.nbytes);
  data_ = raw.data;
  if (reinterpret_cast<uintptr_t>(data_) % elem_bytes(type_) != 0) {
    // Files from writers that do not pad the header leave 2-byte types unaligned; copy rather than
    // read them through misaligned pointers.
    owned_.assign(raw.data, raw.data + nbytes_);
    data_ = owned_.data();
  }
}

std::string DenseTensor::type_name() const {
  switch (type_) {
    case DenseType::BF16: return "BF16";
    case DenseType::F16: return "F16";
    case DenseType::F32: return "F32";
  }
  return "?";
}

void DenseTensor::matmul_raw(const Tensor& x, const Tensor& y) const {
  switch (type_) {
    case DenseType::BF16: return matmul_typed<DenseType::BF16>(data_, rows(), cols(), x, y);
    case DenseType::F16: return matmul_typed<DenseType::F16>(data_, rows(), cols(), x, y);
    case DenseType::F32: return matmul_typed<DenseType::F32>(data_, rows(), cols(), x, y);
  }
}

void DenseTensor::get_rows(const int32_t* ids, int n, const Tensor& out) const {
  check(shape_.size() == 2, "get_rows: tensor '", name_, "' has shape ", shape_str(shape_), ", expected 2-D");
  check(out.dtype == DType::F32 && out.rows == n && out.cols == cols(), "get_rows: tensor '", name_,
        "': output is ", dtype_name(out.dtype), " [", out.rows, ", ", out.cols, "], expected f32 [", n, ", ", cols(),
        "]");
  for (int i = 0; i < n; ++i)
    check(ids[i] >= 0 && ids[i] < rows(), "get_rows: tensor '", name_, "': id ", ids[i], " at position ", i,
          " is outside [0, ", rows(), ")");
  for (int i = 0; i < n; ++i) convert_any(type_, data_, int64_t(ids[i]) * cols(), cols(), out.row(i));
}

void DenseTensor::dequantize(float* out_host) const {
  parallel_for(numel_, int64_t(1) << 16, [&](int64_t b, int64_t e) { convert_any(type_, data_, b, e - b, out_host + b); });
}

}  // namespace tandem::safetensors
