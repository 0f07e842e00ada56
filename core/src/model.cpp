// Model loading (checkpoint → formats → mixers) and the one forward path.
#include "tandem/model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <spdlog/spdlog.h>

#include "expert_set.h"
#include "mixers.h"
#include "scratch.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/weights.h"

namespace tandem {
namespace {

std::vector<int64_t> squeeze(const std::vector<int64_t>& s) {
  std::vector<int64_t> out;
  for (int64_t d : s)
    if (d != 1) out.push_back(d);
  return out;
}

// Name index over a checkpoint: groups are found by prefix with a binary search.
class TensorIndex {
 public:
  explicit TensorIndex(const Checkpoint& c) {
    for (const auto& t : c.tensors()) sorted_.emplace_back(t.name, &t);
    std::sort(sorted_.begin(), sorted_.end());
  }
  TensorGroup group(const std::string& prefix) const {
    TensorGroup g;
    g.prefix = prefix;
    auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(prefix, (const RawTensor*)nullptr));
    for (; it != sorted_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      if (it->first.size() == prefix.size() || it->first[prefix.size()] == '.') g.members.push_back(it->second);
    return g;
  }
  bool has(const std::string& name) const {
    auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(name, (const RawTensor*)nullptr));
    return it != sorted_.end() && it->first == name;
  }

 private:
  std::vector<std::pair<std::string, const RawTensor*>> sorted_;
};

// The format whose probe_group scores highest; an error naming the group when none claims it.
const WeightFormat& claim_group(const std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>>& formats,
                                const TensorGroup& g, std::string* format_name = nullptr) {
  int best = 0;
  const WeightFormat* fmt = nullptr;
  std::string names;
  for (const auto& [fname, f] : formats) {
    names += (names.empty() ? "" : ", ") + fname;
    int s = f->probe_group(g);
    if (s > best) {
      best = s, fmt = f.get();
      if (format_name) *format_name = fname;
    }
  }
  if (!fmt) fail("no format plugin claims tensor group ", g.describe(), " (formats loaded: ", names, ")");
  return *fmt;
}

// Edit distance, for naming the tensors closest to one that is not there.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Loads tensor groups through whichever format plugin claims them best.
class GroupLoader {
 public:
  GroupLoader(const TensorIndex& index, std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> formats,
              Backend& be, MixerScratch& scratch, size_t& bytes)
      : index_(index), formats_(std::move(formats)), be_(be), scratch_(scratch), bytes_(bytes) {}

  bool has(const std::string& name) const { return !index_.group(name).members.empty(); }

  TensorGroup group(const std::string& name) const {
    TensorGroup g = index_.group(name);
    check(!g.members.empty(), "missing tensor '", name, "' (neither '", name, "' nor '", name, ".weight' is in the checkpoint)");
    return g;
  }

  const WeightFormat& claim(const TensorGroup& g) const { return claim_group(formats_, g); }

  std::unique_ptr<QuantizedTensor> load(const std::string& name, const std::vector<int64_t>& shape) {
    TensorGroup g = group(name);
    g.shape = shape;
    auto t = claim(g).load(g, be_);
    bytes_ += t->bytes();
    return t;
  }

  // Experts as one set from the format that claims the first expert, or per-expert loads.
  std::unique_ptr<ExpertSet> load_experts(const std::vector<std::string>& names, const std::vector<int64_t>& shape,
                                          const std::function<void(const QuantizedTensor&, const std::string&)>& check_shape) {
    std::vector<TensorGroup> groups;
    for (const auto& n : names) {
      groups.push_back(group(n));
      groups.back().shape = shape;
    }
    if (auto set = claim(groups[0]).load_experts(groups, be_)) {
      bytes_ += set->bytes();
      expert_bytes_ += set->bytes();
      return set;
    }
    std::vector<std::unique_ptr<QuantizedTensor>> each;
    for (size_t e = 0; e < groups.size(); ++e) {
      each.push_back(claim(groups[e]).load(groups[e], be_));
      check_shape(*each.back(), names[e]);
      bytes_ += each.back()->bytes();
      expert_bytes_ += each.back()->bytes();
    }
    return make_per_expert_set(std::move(each), be_, scratch_);
  }
  // Bytes of routed experts loaded so far (part of the total).
  size_t expert_bytes() const { return expert_bytes_; }

 private:
  const TensorIndex& index_;
  std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> formats_;
  Backend& be_;
  MixerScratch& scratch_;
  size_t& bytes_;
  size_t expert_bytes_ = 0;
};

class LayerWeights : public WeightLoader {
 public:
  LayerWeights(GroupLoader& g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}
  bool has(const std::string& name) const override { return g_.has(full_name(name)); }
  std::string full_name(const std::string& name) const override { return prefix_ + name; }
  std::unique_ptr<QuantizedTensor> tensor(const std::string& name, const std::vector<int64_t>& shape) override {
    auto t = g_.load(full_name(name), shape);
    check(t->shape() == shape, "tensor '", full_name(name), "': expected shape ", shape_str(shape), ", found ",
          shape_str(t->shape()));
    return t;
  }
  std::unique_ptr<ExpertSet> experts(const std::vector<std::string>& names, const std::vector<int64_t>& shape) override {
    check(!names.empty(), "experts: no names");
    std::vector<std::string> full;
    for (const auto& n : names) full.push_back(full_name(n));
    auto check_shape = [&](const QuantizedTensor& t, const std::string& name) {
      check(t.shape() == shape, "tensor '", name, "': expected shape ", shape_str(shape), ", found ", shape_str(t.shape()));
    };
    auto set = g_.load_experts(full, shape, check_shape);
    check(set->n_experts() == int(names.size()) && set->rows() == shape[0] && set->cols() == shape[1], "experts '",
          full[0], "' …: expected ", names.size(), " × ", shape_str(shape), ", found ", set->n_experts(), " × [",
          set->rows(), ", ", set->cols(), "]");
    return set;
  }
  std::vector<float> vector(const std::string& name, const std::vector<int64_t>& shape) override {
    auto t = g_.load(full_name(name), shape);
    check(squeeze(t->shape()) == squeeze(shape), "tensor '", full_name(name), "': expected shape ", shape_str(shape),
          ", found ", shape_str(t->shape()));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    t->dequantize(v.data());
    return v;
  }

 private:
  GroupLoader& g_;
  std::string prefix_;
};

std::unique_ptr<Buffer> upload(Backend& be, const std::vector<float>& v) {
  auto b = be.alloc(std::max<size_t>(v.size() * sizeof(float), 64));
  be.upload(b->data(), v.data(), v.size() * sizeof(float));
  return b;
}

}  // namespace

size_t Sequence::bytes() const {
  size_t b = 0;
  for (const auto& s : states) b += s->bytes();
  return b;
}

namespace {

// Recorded verify passes by a key of their shape: one sequence's by (tokens, all_positions), and the
// Model's batched passes by their sequences, rows and all_positions in row order. A graph holds the
// device addresses of its capture (scratch, states, weights), so all are dropped when the backend's
// memory epoch moves (a buffer was released: a scratch regrown, a sequence freed — which also makes
// a freed sequence's address in a batch key safe to reuse).
template <class K>
struct GraphCache {
  using Key = K;
  uint64_t epoch = 0;
  uint64_t taps = 0;  // Model::Impl::taps_version of the recordings (a recording copies its taps)
  std::map<Key, std::unique_ptr<Graph>> graphs;
  std::set<Key> warm;  // shapes run once op by op: every scratch they need has grown already
};
using SequenceGraphs = GraphCache<std::pair<int, bool>>;
using BatchKey = std::vector<std::tuple<const Sequence*, int, bool>>;
// Batch shapes kept at most; past it the cache starts over (slots come and go, drafted k varies).
constexpr size_t kMaxBatchGraphs = 64;

}  // namespace

struct Model::Impl {
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<QuantizedTensor> embed, lm_head;
  std::unique_ptr<Buffer> norm_f;
  std::vector<std::unique_ptr<Buffer>> norms;
  MixerScratch mixer_scratch;  // before the mixers, which refer to it
  std::vector<std::unique_ptr<Mixer>> mixers;
  std::vector<std::shared_ptr<LayerFactory>> factories;  // keep plugin libraries loaded
  std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> formats;  // Model::load_weight
  Scratch x, h, out, logits;
  // int64[batch_max_rows]: the first position of the running pass (of sequence b of a batch at b),
  // read by attention
  std::unique_ptr<Buffer> pos0;
  int64_t passes = 0;  // Model::passes()
  std::function<void(int, const Tensor&)> observer;
  std::vector<int> taps;          // layers whose output forward() copies (Model::set_taps)
  std::vector<Scratch> tap_bufs;  // one per tap, [rows, hidden]
  std::vector<Tensor> tapped;     // the last forward's rows of each tap
  uint64_t taps_version = 0;
  GraphStats graph_stats;
  int dropped_recordings = 0;

  GraphCache<BatchKey> batch_graphs;

  void graphs_off(const std::string& why, bool expected);
  void run_verify(Backend& be, Sequence& seq, int n, bool all_positions, const std::function<void()>& pass);
  template <class Key>
  void run_graph(Backend& be, GraphCache<Key>& cache, const Key& key, int rows, const std::function<void()>& pass);
};

void Model::Impl::graphs_off(const std::string& why, bool expected) {
  graph_stats.enabled = false;
  graph_stats.off_reason = why;
  if (expected) spdlog::debug("graphs off: {}", why);
  else spdlog::warn("graphs off: {}; verify passes run op by op", why);
}

// Runs `pass` (everything after the embedding) from the sequence's graph for this shape, recording it
// on its second run; op by op when graphs are off or the pass cannot be recorded.
void Model::Impl::run_verify(Backend& be, Sequence& seq, int n, bool all_positions,
                             const std::function<void()>& pass) {
  if (!graph_stats.enabled || observer || n > graph_max_tokens) {
    ++graph_stats.eager;
    return pass();
  }
  if (!seq.graphs) {
    auto g = std::make_shared<SequenceGraphs>();
    g->epoch = be.memory_epoch();
    seq.graphs = g;
  }
  run_graph(be, *static_cast<SequenceGraphs*>(seq.graphs.get()), SequenceGraphs::Key{n, all_positions}, n, pass);
}

// `pass` from cache's graph for `key` (a pass of `rows` rows), recorded on the key's second run.
template <class Key>
void Model::Impl::run_graph(Backend& be, GraphCache<Key>& sg, const Key& key, int rows,
                            const std::function<void()>& pass) {
  if (sg.epoch != be.memory_epoch() || sg.taps != taps_version) {
    sg.graphs.clear();
    sg.epoch = be.memory_epoch();
    sg.taps = taps_version;
  }
  if (auto it = sg.graphs.find(key); it != sg.graphs.end()) {
    it->second->launch();
    ++graph_stats.replayed;
    graph_stats.launches[rows] = {it->second->kernel_nodes(), it->second->copy_nodes()};
    return;
  }
  if (sg.warm.insert(key).second) {  // first run of this shape: grow every scratch it needs
    ++graph_stats.eager;
    return pass();
  }
  if (!be.begin_capture()) {
    graphs_off("backend '" + be.device() + "' cannot record graphs", true);
    ++graph_stats.eager;
    return pass();
  }
  std::unique_ptr<Graph> graph;
  try {
    pass();
  } catch (const std::exception& e) {
    (void)be.end_capture();  // nothing recorded ran; the pass runs op by op below
    graphs_off(std::string("a verify pass could not be recorded (") + e.what() + ")", false);
    ++graph_stats.eager;
    return pass();
  }
  try {
    graph = be.end_capture();
  } catch (const std::exception& e) {
    graphs_off(std::string("a recorded verify pass could not be made a graph (") + e.what() + ")", false);
    ++graph_stats.eager;
    return pass();
  }
  if (!graph || sg.epoch != be.memory_epoch()) {
    // A buffer was allocated or released while recording: run it op by op; the next run records again.
    if (++dropped_recordings >= 3) graphs_off("3 recordings allocated or released buffers", false);
    ++graph_stats.eager;
    return pass();
  }
  graph->launch();
  ++graph_stats.captured;
  ++graph_stats.replayed;
  graph_stats.launches[rows] = {graph->kernel_nodes(), graph->copy_nodes()};
  sg.graphs.emplace(key, std::move(graph));
}

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() {
  impl_->mixers.clear();  // before the factories' libraries may unload
}

std::unique_ptr<Checkpoint> open_checkpoint(const LoadOptions& o, PluginRegistry& reg, std::string* format_name) {
  check(std::filesystem::exists(o.path), "model path '", o.path, "' does not exist");
  std::shared_ptr<WeightFormat> container;
  std::string name = o.format;
  if (o.format == "auto") {
    int best = 0;
    for (const auto& [fname, f] : reg.formats(o.device)) {
      int s = f->probe_path(o.path);
      if (s > best) best = s, container = f, name = fname;
    }
    check(container != nullptr, "no format plugin can read '", o.path, "'");
  } else {
    container = reg.format(o.format, o.device);
    check(container->probe_path(o.path) > 0, "format '", o.format, "' cannot read '", o.path, "'");
  }
  if (format_name) *format_name = name;
  return container->open(o.path);
}

std::unique_ptr<QuantizedTensor> load_tensor(const Checkpoint& checkpoint, const std::string& name,
                                             PluginRegistry& reg, Backend& backend, std::string* format_name) {
  TensorIndex index(checkpoint);
  TensorGroup g = index.group(name);
  if (g.members.empty()) {
    // The closest names, and the groups they belong to (a name without its last ".part").
    std::set<std::string> candidates;
    for (const auto& t : checkpoint.tensors()) {
      candidates.insert(t.name);
      if (auto dot = t.name.rfind('.'); dot != std::string::npos) candidates.insert(t.name.substr(0, dot));
    }
    std::vector<std::pair<size_t, std::string>> ranked;
    for (const auto& c : candidates) ranked.emplace_back(edit_distance(name, c), c);
    std::sort(ranked.begin(), ranked.end());
    std::string close;
    for (size_t i = 0; i < ranked.size() && i < 5; ++i) close += (i ? ", " : "") + ranked[i].second;
    fail(checkpoint.path(), ": no tensor '", name, "' and none named '", name, ".*' (", checkpoint.tensors().size(),
         " tensors; closest: ", close.empty() ? "none" : close, ")");
  }
  return claim_group(reg.formats(backend.device()), g, format_name).load(g, backend);
}

std::unique_ptr<Model> Model::load(const LoadOptions& o, PluginRegistry& reg) {
  std::string format_name;
  auto checkpoint = open_checkpoint(o, reg, &format_name);
  return load(std::move(checkpoint), format_name, o, reg);
}

std::unique_ptr<Model> Model::load(std::unique_ptr<Checkpoint> checkpoint, const std::string& format_name,
                                   const LoadOptions& o, PluginRegistry& reg) {
  check(checkpoint != nullptr, "Model::load: no checkpoint");
  std::unique_ptr<Model> m(new Model());
  Impl& im = *m->impl_;
  static std::atomic<uint64_t> serials{0};
  m->serial_ = ++serials;

  im.checkpoint = std::move(checkpoint);
  m->format_name_ = format_name;
  auto formats = reg.formats(o.device);
  im.formats = formats;
  m->desc_ = parse_model_config(im.checkpoint->config_json(), im.checkpoint->path() + " (config)");
  const ModelDesc& d = m->desc_;

  if (o.threads >= 0) set_thread_count(o.threads);
  m->backend_ = o.backend ? o.backend : reg.backend(o.device);
  Backend& be = *m->backend_;
  check(be.device() == o.device, "Model::load: the backend given runs on '", be.device(), "', the options ask for '",
        o.device, "'");
  im.pos0 = be.alloc(sizeof(int64_t) * size_t(batch_max_rows));
  im.graph_stats.off_reason = be.graphs_off_reason();
  im.graph_stats.enabled = im.graph_stats.off_reason.empty();

  TensorIndex index(*im.checkpoint);
  GroupLoader loader(index, formats, be, im.mixer_scratch, m->weight_bytes_);
  // NVIDIA's checkpoints say backbone.*; Puzzle releases say model.*.
  std::string root;
  for (const char* p : {"backbone.", "model."})
    if (index.has(std::string(p) + "embeddings.weight") || index.has(std::string(p) + "norm_f.weight")) root = p;
  check(!root.empty(), im.checkpoint->path(), ": no 'backbone.embeddings.weight' or 'model.embeddings.weight' tensor");

  LayerWeights top(loader, root);
  im.embed = top.tensor("embeddings", {d.vocab, d.hidden});
  const size_t before_head = m->weight_bytes_;
  im.norm_f = upload(be, top.vector("norm_f", {d.hidden}));
  if (d.tie_embeddings || !loader.has("lm_head")) {
    check(d.tie_embeddings, im.checkpoint->path(), ": missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
    im.lm_head = loader.load(root + "embeddings", {d.vocab, d.hidden});
  } else {
    LayerWeights head(loader, "");
    im.lm_head = head.tensor("lm_head", {d.vocab, d.hidden});
  }
  DecodeParts& parts = m->decode_parts_;
  parts.embedding = im.embed->bytes() / size_t(d.vocab);
  parts.head = m->weight_bytes_ - before_head;  // the final norm and the LM head

  std::shared_ptr<LayerFactory> mamba;
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const LayerDesc& l = d.layers[i];
    std::string p = root + "layers." + std::to_string(i) + ".";
    LayerWeights lw(loader, p);
    const size_t before = m->weight_bytes_, experts_before = loader.expert_bytes();
    im.norms.push_back(upload(be, lw.vector("norm", {d.hidden})));
    LayerWeights mw(loader, p + "mixer.");
    switch (l.kind) {
      case LayerKind::Mamba: {
        if (!mamba) {
          mamba = o.mamba.empty() ? reg.layer_for(LayerKind::Mamba, o.device) : reg.layer(o.mamba, o.device);
          check(mamba->kind() == LayerKind::Mamba, "layer plugin '", o.mamba, "' does not make Mamba layers");
          im.factories.push_back(mamba);
        }
        LayerDesc ld = l;
        ld.mamba.clamp_dt_prefill = o.hf_prefill_dt_clamp;
        ld.mamba.eps = d.eps;
        im.mixers.push_back(mamba->create(ld, d.hidden, mw, be));
        break;
      }
      case LayerKind::Attention:
        im.mixers.push_back(make_attention(l.attn, d.hidden, mw, be, static_cast<const int64_t*>(im.pos0->data()),
                                           im.mixer_scratch));
        break;
      case LayerKind::MoE:
        im.mixers.push_back(make_moe(l.moe, d.hidden, mw, be, im.mixer_scratch));
        break;
      case LayerKind::MLP: im.mixers.push_back(make_mlp(l.mlp, d.hidden, mw, be, im.mixer_scratch)); break;
    }
    const size_t experts = loader.expert_bytes() - experts_before;
    const size_t routed = l.kind == LayerKind::MoE ? experts / size_t(l.moe.n_experts) * size_t(l.moe.top_k) : 0;
    parts.layers.push_back(m->weight_bytes_ - before - experts + routed);
    if (o.progress) o.progress(double(i + 1) / double(d.layers.size()));
  }
  m->decode_bytes_ = parts.embedding + parts.head;
  for (size_t b : parts.layers) m->decode_bytes_ += b;
  spdlog::info("loaded {} ({} layers, pattern {}) from '{}' via '{}' on {}: {:.1f} MiB of weights", d.model_type,
               d.layers.size(), d.pattern(), im.checkpoint->path(), m->format_name_, be.device(),
               double(m->weight_bytes_) / (1 << 20));
  return m;
}

size_t Model::decode_state_bytes(size_t layer, int64_t pos) const {
  check(layer < desc_.layers.size(), "decode_state_bytes: layer ", layer, " is outside the model's layers [0, ",
        desc_.layers.size(), ")");
  check(pos >= 0, "decode_state_bytes: position must not be negative, found ", pos);
  const LayerDesc& l = desc_.layers[layer];
  switch (l.kind) {
    case LayerKind::Mamba:
      return 2 * size_t(l.mamba.n_heads) * size_t(l.mamba.head_dim) * size_t(l.mamba.state_size) * sizeof(float);
    case LayerKind::Attention:
      return size_t(pos + 1) * 2 * size_t(l.attn.n_kv_heads) * size_t(l.attn.head_dim) * sizeof(float);
    default: return 0;
  }
}

std::unique_ptr<Sequence> Model::new_sequence(int64_t max_tokens) const {
  check(max_tokens > 0, "context size must be positive, found ", max_tokens);
  auto s = std::make_unique<Sequence>();
  s->capacity = max_tokens;
  for (const auto& mx : impl_->mixers) s->states.push_back(mx->new_state(max_tokens));
  return s;
}

void Model::forward(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode, std::vector<float>& logits,
                    bool all_positions) {
  const Tensor lg = queue_pass(seq, tokens, mode, all_positions);
  logits.resize(size_t(lg.numel()));
  backend_->download(logits.data(), lg.data, lg.nbytes());
}

void Model::forward_commit(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode,
                           std::vector<float>& logits, bool all_positions) {
  const Tensor lg = queue_pass(seq, tokens, mode, all_positions);
  commit(seq, int(tokens.size()));
  logits.resize(size_t(lg.numel()));
  backend_->download(logits.data(), lg.data, lg.nbytes());
}

void Model::check_pass(const Sequence& seq, const std::vector<int32_t>& tokens, const std::string& what) const {
  const int64_t n = int64_t(tokens.size());
  check(n > 0, what, ": no tokens");
  check(seq.pos + n <= seq.capacity, what, ": ", seq.pos, " + ", n, " tokens exceed the context window of ",
        seq.capacity);
  for (int32_t t : tokens)
    check(t >= 0 && t < desc_.vocab, what, ": token id ", t, " is outside the vocabulary [0, ", desc_.vocab, ")");
}

Tensor Model::queue_pass(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode, bool all_positions) {
  check_pass(seq, tokens, "forward");
  std::vector<int64_t> head_rows;
  return queue_passes({BatchPass{&seq, tokens, all_positions, nullptr}}, mode, head_rows);
}

Tensor Model::queue_passes(const std::vector<BatchPass>& passes, ForwardMode mode, std::vector<int64_t>& head_off) {
  Impl& im = *impl_;
  ++im.passes;
  Backend& be = *backend_;
  const int64_t H = desc_.hidden;
  const size_t B = passes.size();
  std::vector<ForwardInfo> infos;
  std::vector<int64_t> pos0s, off(1, 0);  // row offsets of x; head_off: of the logits
  head_off.assign(1, 0);
  std::vector<int32_t> tokens;
  for (const BatchPass& p : passes) {
    infos.push_back(ForwardInfo{p.seq->pos, int(p.tokens.size()), mode});
    pos0s.push_back(p.seq->pos);
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
    off.push_back(off.back() + int64_t(p.tokens.size()));
    head_off.push_back(head_off.back() + (p.all_positions ? int64_t(p.tokens.size()) : 1));
  }
  const int64_t n = off.back(), rows = head_off.back();

  // Every buffer of the pass is sized before it runs (a recorded pass must not allocate). The token ids
  // go to the embedding kernel and the positions to device memory outside the recording, so one graph
  // per shape serves every step.
  im.mixer_scratch.reserve(be, n);
  std::vector<Tensor> taps;
  for (auto& b : im.tap_bufs) taps.push_back(b.f32(be, n, H));
  std::vector<int> tap_of(im.taps.empty() ? 0 : im.mixers.size(), -1);  // layer → its tap, or -1
  for (size_t j = 0; j < im.taps.size(); ++j) tap_of[size_t(im.taps[j])] = int(j);
  Tensor x = im.x.f32(be, n, H), h = im.h.f32(be, n, H), out = im.out.f32(be, n, H);
  Tensor lg = im.logits.f32(be, rows, desc_.vocab);
  be.upload(im.pos0->data(), pos0s.data(), B * sizeof(int64_t));
  im.embed->get_rows(tokens.data(), int(n), x);
  if (im.observer) im.observer(-1, x);
  std::vector<std::vector<LayerState*>> states(im.mixers.size());
  for (size_t i = 0; i < im.mixers.size(); ++i)
    for (const BatchPass& p : passes) states[i].push_back(p.seq->states[i].get());
  auto pass = [&] {
    // Layer i's residual add and layer i + 1's norm are one op (add_rms_norm: one launch on the GPU).
    const size_t L = im.mixers.size();
    if (L > 0) be.rms_norm(x, static_cast<float*>(im.norms[0]->data()), desc_.eps, h);
    for (size_t i = 0; i < L; ++i) {
      if (B == 1) im.mixers[i]->forward(h, out, *states[i][0], infos[0]);
      else im.mixers[i]->forward_batch(h, out, states[i], infos);
      if (i + 1 < L) be.add_rms_norm(x, out, static_cast<float*>(im.norms[i + 1]->data()), desc_.eps, h);
      else be.add(x, out, x);
      if (!tap_of.empty() && tap_of[i] >= 0) be.copy(x, taps[size_t(tap_of[i])]);
      if (im.observer) im.observer(int(i), x);
    }
    // The final norm of each pass's rows (or its last row) into consecutive rows, then one LM head.
    for (size_t b = 0; b < B; ++b) {
      const int64_t r = head_off[b + 1] - head_off[b];
      be.rms_norm(x.slice_rows(off[b + 1] - r, r), static_cast<float*>(im.norm_f->data()), desc_.eps,
                  h.slice_rows(head_off[b], r));
    }
    im.lm_head->matmul(h.slice_rows(0, rows), lg);
    if (im.observer) im.observer(int(L), x);
  };
  if (mode != ForwardMode::Verify) {
    pass();
  } else if (B == 1) {
    im.run_verify(be, *passes[0].seq, int(n), passes[0].all_positions, pass);
  } else if (!im.graph_stats.enabled || im.observer) {
    ++im.graph_stats.eager;
    pass();
  } else {
    // The Model's batch graphs: the launches bake in every sequence's state addresses and rows.
    BatchKey key;
    for (const BatchPass& p : passes) key.emplace_back(p.seq, int(p.tokens.size()), p.all_positions);
    GraphCache<BatchKey>& cache = im.batch_graphs;
    if (!cache.graphs.count(key) && (cache.graphs.size() >= kMaxBatchGraphs || cache.warm.size() >= 4 * kMaxBatchGraphs)) {
      cache.graphs.clear();
      cache.warm.clear();
    }
    im.run_graph(be, cache, key, int(n), pass);
  }
  im.tapped = std::move(taps);
  for (size_t b = 0; b < B; ++b) {
    passes[b].seq->pending = true;
    passes[b].seq->last = infos[b];
  }
  return lg;
}

void Model::forward_batch(const std::vector<BatchPass>& passes) {
  static_assert(batch_max_rows <= graph_max_tokens, "a batch stays in the verify passes' kernel regime");
  check(!passes.empty(), "forward_batch: no passes");
  int64_t n = 0;
  for (size_t b = 0; b < passes.size(); ++b) {
    const BatchPass& p = passes[b];
    const std::string what = "forward_batch: pass " + std::to_string(b);
    check(p.seq != nullptr && p.logits != nullptr, what, ": no sequence or no logits");
    for (size_t c = 0; c < b; ++c)
      check(passes[c].seq != p.seq, what, ": the sequence of pass ", c, " again (one pass per sequence)");
    check_pass(*p.seq, p.tokens, what);
    n += int64_t(p.tokens.size());
  }
  // One sequence may take a pass of any length (it is forward()); several stay in the verify regime.
  check(passes.size() == 1 || n <= batch_max_rows, "forward_batch: ", n, " rows in ", passes.size(),
        " passes, at most ", batch_max_rows, " (Model::batch_max_rows)");
  std::vector<int64_t> head_off;
  const Tensor lg = queue_passes(passes, ForwardMode::Verify, head_off);
  // Each pass's rows straight into its vector (sized once by the caller's first step, then reused):
  // no staging copy of the whole batch's logits.
  for (size_t b = 0; b < passes.size(); ++b) {
    const int64_t r = head_off[b + 1] - head_off[b];
    std::vector<float>& dst = *passes[b].logits;
    dst.resize(size_t(r * desc_.vocab));
    backend_->download(dst.data(), lg.slice_rows(head_off[b], r).data, dst.size() * sizeof(float));
  }
}

int64_t Model::passes() const { return impl_->passes; }

void Model::set_forward_observer(std::function<void(int, const Tensor&)> observer) {
  impl_->observer = std::move(observer);
}

const QuantizedTensor& Model::embedding() const { return *impl_->embed; }
const QuantizedTensor& Model::lm_head() const { return *impl_->lm_head; }
const float* Model::final_norm() const { return static_cast<const float*>(impl_->norm_f->data()); }

std::unique_ptr<QuantizedTensor> Model::load_weight(const TensorGroup& group) const {
  return claim_group(impl_->formats, group).load(group, *backend_);
}

void Model::set_taps(std::vector<int> layers) {
  const int L = int(impl_->mixers.size());
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  for (int l : layers) check(l >= 0 && l < L, "taps: layer ", l, " is outside the model's layers [0, ", L, ")");
  Impl& im = *impl_;
  im.taps = std::move(layers);
  im.tap_bufs.clear();
  im.tap_bufs.resize(im.taps.size());
  for (auto& b : im.tap_bufs) (void)b.f32(*backend_, graph_max_tokens, desc_.hidden);
  im.tapped.clear();
  ++im.taps_version;
}

const std::vector<int>& Model::taps() const { return impl_->taps; }

Tensor Model::tap(size_t j) const {
  const Impl& im = *impl_;
  check(j < im.taps.size(), "tap ", j, ": the model has ", im.taps.size(), " taps");
  check(j < im.tapped.size(), "tap ", j, ": no forward ran since the taps were set");
  return im.tapped[j];
}

void Model::set_graphs(bool on) {
  GraphStats& g = impl_->graph_stats;
  g.enabled = on;
  g.off_reason = on ? "" : "switched off";
  impl_->dropped_recordings = 0;
}

const GraphStats& Model::graph_stats() const { return impl_->graph_stats; }

size_t SequenceSnapshot::bytes() const {
  size_t b = 0;
  for (const auto& s : states) b += s->bytes();
  return b;
}

std::unique_ptr<SequenceSnapshot> Model::snapshot(const Sequence& seq) const {
  check(!seq.pending, "snapshot: a forward pass of ", seq.last.n, " tokens is not committed yet");
  check(seq.states.size() == impl_->mixers.size(), "snapshot: the sequence has ", seq.states.size(),
        " layer states, the model ", impl_->mixers.size(), " layers");
  auto snap = std::make_unique<SequenceSnapshot>();
  snap->pos = seq.pos;
  for (size_t i = 0; i < impl_->mixers.size(); ++i) snap->states.push_back(impl_->mixers[i]->snapshot(*seq.states[i], seq.pos));
  return snap;
}

void Model::restore(const SequenceSnapshot& snap, Sequence& seq) const {
  check(!seq.pending, "restore: a forward pass of ", seq.last.n, " tokens is not committed yet");
  check(snap.states.size() == impl_->mixers.size() && seq.states.size() == impl_->mixers.size(), "restore: the snapshot has ",
        snap.states.size(), " and the sequence ", seq.states.size(), " layer states, the model ", impl_->mixers.size(),
        " layers");
  check(snap.pos <= seq.capacity, "restore: a snapshot of ", snap.pos, " tokens exceeds the context window of ",
        seq.capacity);
  for (size_t i = 0; i < impl_->mixers.size(); ++i) impl_->mixers[i]->restore(*snap.states[i], *seq.states[i], snap.pos);
  seq.pos = snap.pos;
}

void Model::commit(Sequence& seq, int n_accepted) {
  check(seq.pending, "commit: no forward pass to commit");
  check(n_accepted >= 0 && n_accepted <= seq.last.n, "commit: ", n_accepted, " tokens accepted, the last pass had ",
        seq.last.n);
  check(seq.last.mode != ForwardMode::Prefill || n_accepted == seq.last.n,
        "commit: a prefill must be committed whole (", seq.last.n, " tokens), not ", n_accepted);
  for (size_t i = 0; i < impl_->mixers.size(); ++i) impl_->mixers[i]->commit(*seq.states[i], seq.last, n_accepted);
  seq.pos += n_accepted;
  seq.pending = false;
}

}  // namespace tandem
