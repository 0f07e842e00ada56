// "toyfmt": int8 weights with one f32 scale per output row (`.weight` I8 [out, in] + `.scale` F32 [out]).
#include <cstring>

#include "tandem/backend.h"
#include "tandem/parallel.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"
#include "tandem/weights.h"

namespace toyfmt {

using namespace tandem;

class Int8Rows : public QuantizedTensor {
 public:
  Int8Rows(const RawTensor& w, const RawTensor& s) : w_(reinterpret_cast<const int8_t*>(w.data)),
                                                     s_(reinterpret_cast<const float*>(s.data)) {
    shape_ = w.shape;
  }
  std::string type_name() const override { return "TOY_I8"; }
  size_t bytes() const override { return size_t(rows() * cols()) + size_t(rows()) * 4; }
  void dequantize(float* out) const override {
    for (int64_t r = 0; r < rows(); ++r)
      for (int64_t c = 0; c < cols(); ++c) out[r * cols() + c] = float(w_[r * cols() + c]) * s_[r];
  }
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override {
    for (int i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols(); ++c) out.row(i)[c] = float(w_[ids[i] * cols() + c]) * s_[ids[i]];
  }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override {
    parallel_for(rows(), 16, [&](int64_t r0, int64_t r1) {
      for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t r = r0; r < r1; ++r) {
          float acc = 0;
          for (int64_t c = 0; c < cols(); ++c) acc += float(w_[r * cols() + c]) * x.row(i)[c];
          y.row(i)[r] = acc * s_[r];
        }
    });
  }

 private:
  const int8_t* w_;
  const float* s_;
};

class ToyFormat : public WeightFormat {
 public:
  int probe_group(const TensorGroup& g) const override {
    const RawTensor* w = g.member("weight");
    const RawTensor* s = g.member("scale");
    return w && s && w->dtype == "I8" && s->dtype == "F32" && w->shape.size() == 2 && s->shape.size() == 1 &&
                   s->shape[0] == w->shape[0]
               ? 20
               : 0;
  }
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& g, Backend& be) const override {
    check(be.device() == "cpu", "toyfmt: no kernels for device '", be.device(), "'");
    return std::make_unique<Int8Rows>(*g.member("weight"), *g.member("scale"));
  }
};

const tandem_provider kProviders[] = {{TANDEM_KIND_FORMAT, "toyfmt", "", Factory<WeightFormat, ToyFormat>::create,
                                       Factory<WeightFormat, ToyFormat>::destroy}};

}  // namespace toyfmt

TANDEM_DEFINE_PLUGIN("toyfmt", "0.1.0", nullptr, toyfmt::kProviders)
