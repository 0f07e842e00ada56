// SynthCheckpoint: pools of random rows shared by same-kind weights, vectors made one by one, and the
// reader-side names of every tensor.
#include "synth_checkpoint.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "synth_data.h"
#include "synth_model.h"
#include "synth_write.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::synth {
namespace {

// Rows a pool holds beyond its largest tensor; tensors start at a random row within them.
constexpr int64_t kSlackRows = 4096;

// Weights drawn from one distribution per (type, row length) can share rows.
bool pooled(const Plan& plan, const StoredTensor& t) {
  const Init init = plan.weights[size_t(t.weight)].init;
  return !t.scale && !t.modelopt_scalar() && (init == Init::Linear || init == Init::Embedding);
}

using PoolKey = std::tuple<int, int, int64_t, int, int>;  // type order, init, row length, EXL3 part, ModelOpt part
PoolKey key_of(const Plan& plan, const StoredTensor& t) {
  return {t.type_order, int(plan.weights[size_t(t.weight)].init), t.row_len, t.exl3_part, t.modelopt_part};
}

struct PoolSize {
  size_t first;  // a tensor of the pool, as the template its rows are drawn like
  int64_t rows;  // largest tensor
};

std::map<PoolKey, PoolSize> pool_sizes(const Plan& plan) {
  std::map<PoolKey, PoolSize> pools;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const StoredTensor& t = plan.tensors[i];
    if (!pooled(plan, t)) continue;
    auto [it, fresh] = pools.emplace(key_of(plan, t), PoolSize{i, t.rows});
    if (!fresh) it->second.rows = std::max(it->second.rows, t.rows);
  }
  return pools;
}

}  // namespace

size_t synth_host_bytes(const Plan& plan) {
  size_t bytes = 0;
  for (const auto& [key, p] : pool_sizes(plan))
    bytes += size_t(p.rows + kSlackRows) * plan.tensors[p.first].row_bytes;
  for (const StoredTensor& t : plan.tensors)
    if (!pooled(plan, t)) bytes += t.nbytes;
  return bytes;
}

SynthCheckpoint::SynthCheckpoint(Plan plan, uint64_t seed, std::string label)
    : plan_(std::move(plan)), label_(std::move(label)) {
  struct Pool {
    const uint8_t* data;
    size_t row_bytes;
  };
  std::map<PoolKey, Pool> pools;
  uint64_t n = 0;
  for (const auto& [key, size] : pool_sizes(plan_)) {
    StoredTensor all = plan_.tensors[size.first];
    all.rows = size.rows + kSlackRows;
    all.nbytes = size_t(all.rows) * all.row_bytes;
    memory_.push_back(std::make_unique_for_overwrite<uint8_t[]>(all.nbytes));
    generate_rows_parallel(plan_, all, stream_id(seed, n++), 0, all.rows, memory_.back().get());
    pools[key] = Pool{memory_.back().get(), all.row_bytes};
    host_bytes_ += all.nbytes;
  }
  Rng offsets(seed ^ 0x0ff5e7);
  for (size_t i = 0; i < plan_.tensors.size(); ++i) {
    const StoredTensor& t = plan_.tensors[i];
    if (pooled(plan_, t)) {
      const Pool& p = pools.at(key_of(plan_, t));
      add_views(t, p.data + size_t(offsets.next() % uint64_t(kSlackRows + 1)) * p.row_bytes);
    } else {
      memory_.push_back(std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(t.nbytes, 1)));
      generate_rows(plan_, t, stream_id(seed, 1000003 + i), 0, t.rows, memory_.back().get());
      host_bytes_ += t.nbytes;
      add_views(t, memory_.back().get());
    }
  }
}

void SynthCheckpoint::add_views(const StoredTensor& t, const uint8_t* data) {
  const Weight& w = plan_.weights[size_t(t.weight)];
  auto add = [&](std::string name, std::string dtype, std::vector<int64_t> shape, const uint8_t* p, size_t bytes) {
    auto [it, fresh] = index_.emplace(name, tensors_.size());
    check(fresh, "synth: tensor '", name, "' appears twice");
    tensors_.push_back(RawTensor{std::move(name), std::move(dtype), std::move(shape), p, bytes, label_});
  };
  if (!is_gguf(plan_.mix)) return add(t.name, t.dtype, t.shape, data, t.nbytes);
  // As GgufCheckpoint names a GGUF file's tensors.
  if (t.scale) {
    const std::string base = w.view_name.substr(0, w.view_name.size() - std::string(".weight").size());
    return add(base + ".scale", t.dtype, {1}, data, t.nbytes);
  }
  if (w.n_experts == 0) return add(w.view_name, t.dtype, w.view_shape, data, t.nbytes);
  const size_t per = t.nbytes / size_t(w.n_experts);
  for (int e = 0; e < w.n_experts; ++e)
    add(w.expert_name(w.view_name, e), t.dtype, w.view_shape, data + size_t(e) * per, per);
}

std::string SynthCheckpoint::config_json() const { return plan_config_json(plan_); }

const RawTensor* SynthCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tandem::synth
