// The Nemotron-H sigmoid router (spec/nemotron_h.md § 5): selection by sigmoid + correction bias,
// optional DeepSeek-style group limiting, weights from the unbiased sigmoid.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "check.h"
#include "kernels.h"
#include "tandem/parallel.h"

namespace tandem::cpu {
namespace {

// NaN never wins a comparison, so it would break the strict weak order of the sorts below.
float rank_key(float x) { return std::isnan(x) ? -INFINITY : x; }

struct RouteScratch {
  std::vector<float> s, sel;
  std::vector<int32_t> order, groups;
  std::vector<float> group_score;
  std::vector<char> allowed;
};

void route_row(const float* logits, const float* bias, const RouteParams& p, RouteScratch& sc,
               int32_t* ids, float* weights) {
  const int e = p.n_experts, gsize = e / p.n_group;
  sc.s.resize(e);
  sc.sel.resize(e);
  for (int j = 0; j < e; ++j) {
    sc.s[j] = 1.0f / (1.0f + std::exp(-logits[j]));
    sc.sel[j] = rank_key(bias ? sc.s[j] + bias[j] : sc.s[j]);
  }
  auto better = [&](int32_t a, int32_t b) {
    return sc.sel[a] > sc.sel[b] || (sc.sel[a] == sc.sel[b] && a < b);
  };

  sc.order.clear();
  if (p.n_group > 1) {
    // Group score: the sum of its two best selection scores (one when a group has one expert).
    sc.group_score.resize(p.n_group);
    sc.groups.resize(p.n_group);
    for (int g = 0; g < p.n_group; ++g) {
      const float* gs = sc.sel.data() + g * gsize;
      float a = -INFINITY, b = -INFINITY;
      for (int j = 0; j < gsize; ++j) {
        if (gs[j] > a) b = a, a = gs[j];
        else if (gs[j] > b) b = gs[j];
      }
      sc.group_score[g] = gsize > 1 ? a + b : a;
      sc.groups[g] = g;
    }
    std::partial_sort(sc.groups.begin(), sc.groups.begin() + p.topk_group, sc.groups.end(),
                      [&](int32_t a, int32_t b) {
                        float sa = rank_key(sc.group_score[a]), sb = rank_key(sc.group_score[b]);
                        return sa > sb || (sa == sb && a < b);
                      });
    for (int i = 0; i < p.topk_group; ++i)
      for (int j = 0; j < gsize; ++j) sc.order.push_back(sc.groups[i] * gsize + j);
  } else {
    sc.order.resize(e);
    std::iota(sc.order.begin(), sc.order.end(), 0);
  }
  std::partial_sort(sc.order.begin(), sc.order.begin() + p.top_k, sc.order.end(), better);

  float sum = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    ids[j] = sc.order[j];
    weights[j] = sc.s[sc.order[j]];
    sum += weights[j];
  }
  if (p.norm_topk_prob)
    for (int j = 0; j < p.top_k; ++j) weights[j] /= sum + 1e-20f;
  for (int j = 0; j < p.top_k; ++j) weights[j] *= p.scaling;
}

}  // namespace

void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
               float* weights) {
  check(p.n_experts > 0, "moe_route: n_experts must be positive, found ", p.n_experts);
  check_tensor("moe_route", "logits", logits, logits.rows, p.n_experts);
  check(p.n_group > 0 && p.n_experts % p.n_group == 0, "moe_route: n_group must divide n_experts ",
        p.n_experts, ", found ", p.n_group);
  check(p.topk_group >= 1 && p.topk_group <= p.n_group, "moe_route: topk_group must be in [1, ",
        p.n_group, "], found ", p.topk_group);
  const int64_t eligible = int64_t(p.topk_group) * (p.n_experts / p.n_group);
  check(p.top_k >= 1 && p.top_k <= eligible, "moe_route: top_k must be in [1, ", eligible,
        "] (experts in the kept groups), found ", p.top_k);
  check(std::isfinite(p.scaling), "moe_route: scaling must be finite, found ", p.scaling);
  if (logits.rows == 0) return;
  check_ptr("moe_route", "ids", ids);
  check_ptr("moe_route", "weights", weights);

  const float* base = logits.f32();
  parallel_for(logits.rows, row_grain(int64_t(p.n_experts) * 8), [&](int64_t r0, int64_t r1) {
    thread_local RouteScratch sc;
    for (int64_t r = r0; r < r1; ++r)
      route_row(base + r * p.n_experts, bias, p, sc, ids + r * p.top_k, weights + r * p.top_k);
  });
}

}  // namespace tandem::cpu
