// Per-expert sets: group the rows of each expert, one matmul per expert, scatter back.
#include "expert_set.h"

#include <cstring>

#include "scratch.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem {
namespace {

class PerExpertSet : public ExpertSet {
 public:
  PerExpertSet(std::vector<std::unique_ptr<QuantizedTensor>> e, Backend& be, MixerScratch& s)
      : experts_(std::move(e)), be_(be), s_(s) {
    check(!experts_.empty(), "expert set: no experts");
    check(be.is_host(), "expert set: per-expert weights run on host memory only, and backend '", be.device(),
          "' is not host-addressable");
    // A token picks an expert at most once, so one expert's rows are at most the pass's tokens.
    s.gather_in.fit(cols()), s.gather_out.fit(rows());
  }
  int n_experts() const override { return int(experts_.size()); }
  int64_t rows() const override { return experts_[0]->rows(); }
  int64_t cols() const override { return experts_[0]->cols(); }
  std::string type_name() const override { return experts_[0]->type_name(); }
  size_t bytes() const override {
    size_t b = 0;
    for (const auto& e : experts_) b += e->bytes();
    return b;
  }

  void gather_matmul(const Tensor& x, const int32_t* ids, int k, const Tensor& y) const override {
    check(k >= 1 && y.rows == x.rows * k && x.cols == cols() && y.cols == rows(), "gather_matmul: x [", x.rows,
          ", ", x.cols, "], k ", k, ", y [", y.rows, ", ", y.cols, "] do not fit experts [", rows(), ", ", cols(), "]");
    const int64_t n = y.rows;
    rows_of_.assign(experts_.size(), {});
    for (int64_t r = 0; r < n; ++r) {
      int32_t e = ids[r];
      check(e >= 0 && e < n_experts(), "gather_matmul: expert id ", e, " outside [0, ", n_experts(), ")");
      rows_of_[size_t(e)].push_back(r);
    }
    for (size_t e = 0; e < experts_.size(); ++e) {
      const auto& rs = rows_of_[e];
      if (rs.empty()) continue;
      const int64_t m = int64_t(rs.size());
      Tensor in = s_.gather_in.f32(be_, m, x.cols), out = s_.gather_out.f32(be_, m, y.cols);
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(in.row(i), x.row(rs[size_t(i)] / k), size_t(x.cols) * sizeof(float));
      experts_[e]->matmul(in, out);
      for (int64_t i = 0; i < m; ++i) std::memcpy(y.row(rs[size_t(i)]), out.row(i), size_t(y.cols) * sizeof(float));
    }
  }

 private:
  std::vector<std::unique_ptr<QuantizedTensor>> experts_;
  Backend& be_;
  MixerScratch& s_;  // the Model's; a Model is driven by one thread at a time
  mutable std::vector<std::vector<int64_t>> rows_of_;
};

}  // namespace

std::unique_ptr<ExpertSet> make_per_expert_set(std::vector<std::unique_ptr<QuantizedTensor>> experts,
                                               Backend& backend, MixerScratch& scratch) {
  return std::make_unique<PerExpertSet>(std::move(experts), backend, scratch);
}

}  // namespace tandem
