// Base behaviour of the weight interfaces: group lookup, validation before a format's raw kernel.
#include "tandem/weights.h"

#include "tandem/error.h"

namespace tandem {

const RawTensor* Checkpoint::find(const std::string& name) const {
  for (const auto& t : tensors())
    if (t.name == name) return &t;
  return nullptr;
}

std::string Checkpoint::dump() const {
  std::string s = "checkpoint " + path() + ": " + std::to_string(tensors().size()) + " tensors\n";
  for (const auto& t : tensors())
    s += t.name + "  " + t.dtype + "  " + shape_str(t.shape) + "  " + std::to_string(t.nbytes) + " B\n";
  return s;
}

const RawTensor* TensorGroup::member(const std::string& suffix) const {
  std::string want = suffix.empty() ? prefix : prefix + "." + suffix;
  for (const RawTensor* t : members)
    if (t->name == want) return t;
  return nullptr;
}

std::string TensorGroup::describe() const {
  std::string s = "'" + prefix + "' {";
  for (size_t i = 0; i < members.size(); ++i) {
    const RawTensor* t = members[i];
    std::string rel = t->name.size() > prefix.size() ? t->name.substr(prefix.size() + 1) : "(self)";
    s += (i ? ", " : "") + rel + ": " + t->dtype + " " + shape_str(t->shape);
  }
  return s + "}";
}

namespace {
void check_matmul(const QuantizedTensor& w, const Tensor& x, const Tensor& y) {
  // Plain ifs: check()'s arguments (shape strings) would be built on every call of this hot path.
  if (w.shape().size() != 2)
    fail("matmul: weight of type ", w.type_name(), " has shape ", shape_str(w.shape()), ", expected 2-D [out, in]");
  if (x.dtype != DType::F32 || y.dtype != DType::F32)
    fail("matmul: expected f32 activations, found ", dtype_name(x.dtype), " -> ", dtype_name(y.dtype));
  if (x.cols != w.cols())
    fail("matmul: input has ", x.cols, " columns, weight ", shape_str(w.shape()), " expects ", w.cols());
  if (y.cols != w.rows() || y.rows != x.rows)
    fail("matmul: output is [", y.rows, ", ", y.cols, "], expected [", x.rows, ", ", w.rows(), "]");
}
}  // namespace

bool QuantizedTensor::matmul_fused(const Tensor& x, const Tensor& y, Epilogue ep) const {
  check_matmul(*this, x, y);
  if (x.rows == 0) return true;
  if (ep == Epilogue::None) {
    matmul_raw(x, y);
    return true;
  }
  return matmul_fused_raw(x, y, ep);
}

void QuantizedTensor::matmul(const Tensor& x, const Tensor& y) const {
  // Plain ifs: check()'s arguments (shape strings) would be built on every call of this hot path.
  if (shape_.size() != 2)
    fail("matmul: weight of type ", type_name(), " has shape ", shape_str(shape_), ", expected 2-D [out, in]");
  if (x.dtype != DType::F32 || y.dtype != DType::F32)
    fail("matmul: expected f32 activations, found ", dtype_name(x.dtype), " -> ", dtype_name(y.dtype));
  if (x.cols != cols())
    fail("matmul: input has ", x.cols, " columns, weight ", shape_str(shape_), " expects ", cols());
  if (y.cols != rows() || y.rows != x.rows)
    fail("matmul: output is [", y.rows, ", ", y.cols, "], expected [", x.rows, ", ", rows(), "]");
  if (x.rows == 0) return;
  matmul_raw(x, y);
}

void QuantizedTensor::get_rows(const int32_t*, int, const Tensor&) const {
  fail("get_rows is not supported by weight type ", type_name());
}

std::unique_ptr<Checkpoint> WeightFormat::open(const std::string& path) const {
  fail("this format plugin does not read containers (asked to open '", path, "')");
}

}  // namespace tandem
