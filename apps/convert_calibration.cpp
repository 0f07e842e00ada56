// Hessian collection for the EXL3 converter (convert_calibration.h).
#include "convert_calibration.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/text/tokenizer.h"
#include "tandem/weights.h"

namespace tandem::cli {

namespace {

struct Accumulator {
  int64_t in = 0, rows = 0;
  std::vector<double> h;
};

// The dense weight, plus xᵀx of every row it multiplies.
class RecordingTensor : public QuantizedTensor {
 public:
  RecordingTensor(std::unique_ptr<QuantizedTensor> inner, Accumulator& acc) : inner_(std::move(inner)), acc_(acc) {
    shape_ = inner_->shape();
  }
  std::string type_name() const override { return inner_->type_name(); }
  size_t bytes() const override { return inner_->bytes(); }
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override { inner_->get_rows(ids, n, out); }
  void dequantize(float* out) const override { inner_->dequantize(out); }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override {
    const int64_t in = x.cols;
    if (acc_.h.empty()) acc_.in = in, acc_.h.assign(size_t(in * in), 0.0);
    const float* xd = x.f32();
    parallel_for(in, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double* hi = &acc_.h[size_t(i * in)];
        for (int64_t r = 0; r < x.rows; ++r) {
          const float* xr = xd + r * in;
          const double xi = xr[i];
          if (xi == 0) continue;
          for (int64_t j = 0; j < in; ++j) hi[j] += xi * xr[j];
        }
      }
    });
    acc_.rows += x.rows;
    inner_->matmul(x, y);
  }

 private:
  std::unique_ptr<QuantizedTensor> inner_;
  Accumulator& acc_;
};

class RecordingFormat : public WeightFormat {
 public:
  RecordingFormat(std::shared_ptr<WeightFormat> inner, const std::set<std::string>& linears,
                  std::map<std::string, Accumulator>& acc)
      : inner_(std::move(inner)), linears_(linears), acc_(acc) {}
  int probe_group(const TensorGroup& g) const override {
    if (!linears_.count(g.prefix)) return 0;
    int s = inner_->probe_group(g);
    return s > 0 ? s + 1000 : 0;
  }
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& g, Backend& backend) const override {
    return std::make_unique<RecordingTensor>(inner_->load(g, backend), acc_[g.prefix]);
  }

 private:
  std::shared_ptr<WeightFormat> inner_;
  std::set<std::string> linears_;
  std::map<std::string, Accumulator>& acc_;
};

}  // namespace

CalibrationResult calibrate(const std::string& model_dir, const std::string& text, const std::set<std::string>& linears,
                            int64_t max_tokens, int64_t sequence_tokens, int threads) {
  PluginRegistry reg;
  reg.load_default();
  std::map<std::string, Accumulator> acc;
  reg.add_format("convert-calibration", std::make_shared<RecordingFormat>(reg.format("safetensors", "cpu"), linears, acc));
  LoadOptions lo;
  lo.path = model_dir;
  lo.format = "safetensors";
  lo.device = "cpu";
  lo.threads = threads;
  auto checkpoint = open_checkpoint(lo, reg);
  auto tj = checkpoint->side_file("tokenizer.json");
  check(tj.has_value(), "tandem convert: --calibration needs the model's tokenizer.json, and '", model_dir,
        "' has none");
  Tokenizer tok = Tokenizer::from_json(*tj, checkpoint->side_file("tokenizer_config.json").value_or(""),
                                       model_dir + "/tokenizer.json");
  std::vector<int32_t> ids = tok.encode(text, false, false);
  check(!ids.empty(), "tandem convert: the calibration text gives no tokens");
  if (int64_t(ids.size()) > max_tokens) ids.resize(size_t(max_tokens));

  auto model = Model::load(std::move(checkpoint), "safetensors", lo, reg);
  CalibrationResult r;
  std::vector<float> logits;
  for (size_t b = 0; b < ids.size(); b += size_t(sequence_tokens)) {
    std::vector<int32_t> chunk(ids.begin() + long(b), ids.begin() + long(std::min(ids.size(), b + size_t(sequence_tokens))));
    auto seq = model->new_sequence(int64_t(chunk.size()));
    model->forward(*seq, chunk, ForwardMode::Prefill, logits, false);
    r.tokens += int64_t(chunk.size());
    ++r.sequences;
  }
  for (auto& [name, a] : acc) {
    Hessian& h = r.hessians[name];
    h.in = a.in, h.rows = a.rows;
    if (a.rows == 0) continue;
    h.h.resize(a.h.size());
    for (size_t i = 0; i < a.h.size(); ++i) h.h[i] = float(a.h[i] / double(a.rows));
  }
  return r;
}

}  // namespace tandem::cli
