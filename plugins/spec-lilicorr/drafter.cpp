// The lilicorr speculator (drafter.h): context rows from the taps, the full block every step, the
// head's greedy walk (or the backbone's argmax), cut to what the loop asked for.
#include "drafter.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "quant.h"
#include "synth.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/weights.h"

namespace tandem::lilicorr {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

LiliDrafter::LiliDrafter(const SpeculatorContext& ctx, std::shared_ptr<const DrafterWeights> w, const OnTarget& dw,
                         const DrafterOptions& o)
    : ctx_(ctx), w_(std::move(w)), embed_(dw.embed), dev_(*ctx.backend, dw.backbone), opt_(o) {
  check(bool(w_->head) == bool(dw.head), "lilicorr: the head's device weights ", dw.head ? "are" : "are not",
        " loaded, the checkpoint ", w_->head ? "has" : "has no", " head");
  if (dw.head) head_ = std::make_unique<DeviceHead>(*ctx.backend, dw.head, opt_.head_rows);
  const BackboneConfig& c = w_->backbone.c;
  const int64_t S = c.block - 1, K = w_->head ? w_->head->c.topk : 1;
  // Every buffer now, detached: only the drafter's work outside recordings uses them, so neither they
  // nor the growing caches (DeviceBackbone) drop the target's recorded graphs when released.
  auto f32 = [&](int64_t n) { return ctx_.backend->alloc_detached(size_t(n) * sizeof(float)); };
  x_dev_ = f32(c.block * c.hidden);
  rows_dev_ = f32(S * c.hidden);
  logits_dev_ = f32(S * ctx_.vocab);
  emb_dev_ = f32(S * K * c.hidden);
  static_assert(sizeof(int32_t) == sizeof(float), "the candidates' ids and log-probabilities share a buffer");
  out_dev_ = f32(2 * S * K);
  if (opt_.defer)
    for (size_t t = 0; t < c.target_layers.size(); ++t) backlog_dev_.push_back(f32(kBacklogRows * c.hidden));
  const char* names[kStages] = {"catch-up", "block", "candidates", "download", "head", "flush"};
  for (int i = 0; i < kStages; ++i) stage_[i].name = names[i];
  rec_block_.cache = true;
  if (!opt_.graphs) graph_stats_.off = "draft.lilicorr.graphs is false";
  else graph_stats_.off = ctx_.backend->graphs_off_reason();
}

void LiliDrafter::graphs_off(const std::string& why) {
  graph_stats_.off = why;
  for (Recording* r : {&rec_block_, &rec_cand_, &rec_head_}) r->graph.reset();
  spdlog::warn("lilicorr: graphs off: {}; proposals run op by op", why);
}

bool LiliDrafter::replay(Recording& r, const std::function<void()>& work) {
  Backend& be = *ctx_.backend;
  auto eager = [&] {
    ++graph_stats_.eager;
    return false;
  };
  if (!graph_stats_.off.empty()) return eager();
  // A graph holds the addresses of everything it touches: the context caches (regrown: a new
  // generation) and any ordinary buffer, the target's included (released: a new epoch).
  const uint64_t epoch = be.memory_epoch(), generation = r.cache ? dev_.cache_generation() : 0;
  if (r.graph && (r.epoch != epoch || r.generation != generation)) r.graph.reset();
  if (r.graph) {
    r.graph->launch();
    ++graph_stats_.replayed;
    return true;
  }
  if (!r.warm) {  // the first run grows whatever scratch its ops keep, so that the recording allocates nothing
    r.warm = true;
    return eager();
  }
  if (graph_stats_.recorded >= kJudgeRecordings && graph_stats_.replayed < 2 * graph_stats_.recorded) {
    graphs_off(std::to_string(graph_stats_.recorded) + " recordings replayed " +
               std::to_string(graph_stats_.replayed) + " times: they do not last (the memory epoch keeps moving)");
    return eager();
  }
  if (!be.begin_capture()) {
    graphs_off("backend '" + be.device() + "' cannot record graphs");
    return eager();
  }
  try {
    work();
  } catch (const std::exception& e) {
    (void)be.end_capture();  // nothing recorded ran; the caller runs it op by op
    graphs_off(std::string("a proposal could not be recorded (") + e.what() + ")");
    return eager();
  }
  std::unique_ptr<Graph> g;
  try {
    g = be.end_capture();
  } catch (const std::exception& e) {
    graphs_off(std::string("a recorded proposal could not be made a graph (") + e.what() + ")");
    return eager();
  }
  if (!g || be.memory_epoch() != epoch) {
    // A buffer was allocated or released while recording: op by op this time, recorded again next time.
    if (++dropped_ >= 3) graphs_off("3 recordings allocated or released buffers");
    return eager();
  }
  g->launch();
  r.graph = std::move(g);
  r.epoch = epoch;
  r.generation = generation;
  ++graph_stats_.recorded;
  return true;
}

std::vector<SpeculatorStage> LiliDrafter::stages() const {
  if (!opt_.profile) return {};
  return {stage_, stage_ + kStages};
}

void LiliDrafter::lap(Stage st, int64_t items) {
  if (!opt_.profile) return;
  ctx_.backend->synchronize();
  const double t = now_seconds();
  stage_[st].count += 1;
  stage_[st].seconds += t - lap_start_;
  stage_[st].items += items;
  lap_start_ = t;
}

void LiliDrafter::catch_up(Stage as) {
  const int64_t n = backlog_;
  if (n > 0) {
    const int64_t H = w_->backbone.c.hidden;
    std::vector<Tensor> taps;
    for (auto& b : backlog_dev_) taps.push_back(Tensor::f32(static_cast<float*>(b->data()), kBacklogRows, H));
    dev_.append(taps, 0, n);
    backlog_ = 0;
  }
  lap(as, n);
}

void LiliDrafter::begin(const int32_t* prompt, size_t n) {
  dev_.clear();
  backlog_ = 0;
  fed_ = 0;
  committed_ = int64_t(n);
  last_ = n ? prompt[n - 1] : -1;
  block_.clear();
}

void LiliDrafter::observe(const int32_t* tokens, size_t n) {
  if (n == 0) return;
  committed_ += int64_t(n);
  last_ = tokens[n - 1];
}

void LiliDrafter::observe_prompt(const TargetHidden& hidden) { take(hidden); }

void LiliDrafter::observe_hidden(const int32_t* tokens, size_t n, const TargetHidden& hidden) {
  take(hidden);
  observe(tokens, n);
}

void LiliDrafter::take(const TargetHidden& h) {
  const BackboneConfig& c = w_->backbone.c;
  const int64_t H = c.hidden, taps = int64_t(c.target_layers.size());
  check(h.states.size() == size_t(taps), "lilicorr: ", h.states.size(), " tapped layers arrived, expected ", taps);
  check(h.pos0 == fed_, "lilicorr: the states of position ", h.pos0, " arrived, expected position ", fed_,
        " (every committed row must come, in order)");
  if (h.rows <= 0) return;
  for (int64_t t = 0; t < taps; ++t) {
    const Tensor& s = h.states[size_t(t)];
    check(s.rows == h.rows && s.cols == H && s.dtype == DType::F32, "lilicorr: tapped layer ", h.layers[size_t(t)],
          " arrived as ", s.rows, "×", s.cols, ", expected ", h.rows, "×", H, " f32");
  }
  fed_ += h.rows;
  if (!opt_.defer) return dev_.append(h.states, 0, h.rows);
  // The states are valid only during this call: kept as copies until the next proposal projects them
  // in one pass; a backlog that would overflow is projected first, and rows past a whole backlog at
  // once (a prefill chunk) are projected where the target left them.
  if (backlog_ + h.rows > kBacklogRows) {
    if (opt_.profile) ctx_.backend->synchronize(), lap_start_ = now_seconds();
    catch_up(kFlush);
  }
  if (h.rows > kBacklogRows) return dev_.append(h.states, 0, h.rows);
  for (size_t t = 0; t < h.states.size(); ++t)
    ctx_.backend->copy(h.states[t].slice_rows(0, h.rows),
                       Tensor::f32(static_cast<float*>(backlog_dev_[t]->data()), kBacklogRows, w_->backbone.c.hidden)
                           .slice_rows(backlog_, h.rows));
  backlog_ += h.rows;
}

std::vector<float> LiliDrafter::backbone_rows() const {
  const BackboneConfig& c = w_->backbone.c;
  std::vector<float> out(size_t((c.block - 1) * c.hidden));
  ctx_.backend->download(out.data(), rows_dev_->data(), out.size() * sizeof(float));
  return out;
}

std::vector<float> LiliDrafter::anchor_row() const {
  std::vector<float> out(size_t(w_->backbone.c.hidden));
  ctx_.backend->download(out.data(), dev_.last_row().data, out.size() * sizeof(float));
  return out;
}

void LiliDrafter::propose(int max_n, Draft& out) {
  out.clear();
  // Drafts need every committed position but the last one fed (the anchor has no row yet).
  if (max_n <= 0 || last_ < 0 || fed_ == 0 || fed_ != committed_ - 1) return;
  const BackboneConfig& c = w_->backbone.c;
  const int64_t B = c.block, S = B - 1, H = c.hidden;
  const int K = w_->head ? w_->head->c.topk : 1;
  Backend& be = *ctx_.backend;
  if (opt_.profile) be.synchronize(), lap_start_ = now_seconds();
  catch_up(kCatchUp);
  ++block_steps_;

  // Outside any recording: the block [anchor, mask × (B − 1)] embedded by the target's table (the ids
  // go to the weight format's get_rows by value, as in the Model's recorded passes), and the block's
  // position uploaded, which the recorded pass reads.
  std::vector<int32_t> ids(size_t(B), c.mask_token);
  ids[0] = last_;
  const QuantizedTensor& table = embed_ ? *embed_->table.w : *ctx_.embedding;  // an own table first
  table.get_rows(ids.data(), int(B), Tensor::f32(static_cast<float*>(x_dev_->data()), B, H));
  dev_.prepare_block();
  if (opt_.profile) {  // the stages apart: two graphs, a synchronization between them
    if (!replay(rec_block_, [&] { block_pass(); })) block_pass();
    lap(kBlock);
    if (!replay(rec_cand_, [&] { candidates(); })) candidates();
    lap(kCandidates);
  } else if (!replay(rec_block_, [&] { block_pass(), candidates(); })) {
    block_pass();
    candidates();
  }
  std::vector<int32_t>& both = both_;  // ids, then the log-probabilities' bits
  both.resize(size_t(2 * S * K));
  be.download(both.data(), out_dev_->data(), both.size() * sizeof(int32_t));
  cand_.assign(both.begin(), both.begin() + S * K);
  logp_.resize(size_t(S * K));
  std::memcpy(logp_.data(), both.data() + S * K, logp_.size() * sizeof(float));
  lap(kDownload);

  block_.assign(size_t(S), 0);
  path_.clear();
  if (!w_->head) {
    block_ = cand_;
  } else {
    // The candidates' embeddings and the features outside the recording (host ids and values), the
    // lattice recorded (it reads fixed buffers only).
    const Tensor ce = Tensor::f32(static_cast<float*>(emb_dev_->data()), S * K, H);
    const Tensor rows = Tensor::f32(static_cast<float*>(rows_dev_->data()), S, H);
    ctx_.embedding->get_rows(cand_.data(), int(S * K), ce);
    head_->features(logp_.data());
    auto lattice = [&] { head_->run(ce, rows, dev_.last_row(), true); };
    if (!replay(rec_head_, lattice)) lattice();
    head_->fetch(scores_);
    lap(kHead);  // the scores' download included (the head's own)
    path_ = greedy_path(scores_, int(S), K);
    for (int64_t s = 0; s < S; ++s) block_[size_t(s)] = cand_[size_t(s * K + path_[size_t(s)])];
  }
  // The full block ran (its bidirectional rows depend on its width); the loop gets what it asked for.
  out.tokens.assign(block_.begin(), block_.begin() + std::min<int64_t>(max_n, S));
}

void LiliDrafter::block_pass() {
  const BackboneConfig& c = w_->backbone.c;
  const Tensor x = Tensor::f32(static_cast<float*>(x_dev_->data()), c.block, c.hidden);
  if (c.embedding_scale != 1.0f) ctx_.backend->scale_softcap(x, c.embedding_scale, 0.0f);
  dev_.run_block(x, Tensor::f32(static_cast<float*>(rows_dev_->data()), c.block - 1, c.hidden));
}

void LiliDrafter::candidates() {
  const BackboneConfig& c = w_->backbone.c;
  const int64_t S = c.block - 1, K = w_->head ? w_->head->c.topk : 1;
  const Tensor logits = Tensor::f32(static_cast<float*>(logits_dev_->data()), S, ctx_.vocab);
  ctx_.lm_head->matmul(Tensor::f32(static_cast<float*>(rows_dev_->data()), S, c.hidden), logits);
  if (c.output_multiplier != 1.0f || c.softcap > 0)
    ctx_.backend->scale_softcap(logits, c.output_multiplier, c.softcap);
  // Top-K of log_softmax over the whole vocabulary, descending (lowest id first on ties); K = 1: argmax.
  ctx_.backend->top_k_logprobs(logits, int(K), static_cast<int32_t*>(out_dev_->data()),
                               static_cast<float*>(out_dev_->data()) + S * K);
}

std::unique_ptr<Speculator> LiliFactory::create(const SpeculatorContext& ctx, SpeculatorSettings& settings) {
  std::string path = settings.text("path", "");
  DrafterOptions o;
  o.head_rows = settings.integer("head_rows", kHeadMatmulRows, 0, 1 << 20);
  o.defer = settings.flag("defer", true);
  o.profile = settings.flag("profile", false);
  o.graphs = settings.flag("graphs", true);
  settings.finish();
  check(!path.empty(), settings.source().empty() ? "" : settings.source() + ": ",
        "key 'draft.lilicorr.path' is required (the drafter's checkpoint folder)");
  namespace fs = std::filesystem;
  if (fs::path(path).is_relative() && !settings.source().empty())
    path = (fs::path(settings.source()).parent_path() / path).string();
  check(ctx.backend && ctx.desc && ctx.embedding && ctx.lm_head && ctx.target, "lilicorr: the drafter needs the ",
        "target model, its backend, shapes, embedding and LM head (SpeculatorContext incomplete)");
  check(&ctx.target->backend() == ctx.backend, "lilicorr: the context's backend is not the target's");
  std::shared_ptr<const DrafterWeights> w;
  std::error_code ec;
  const std::string key = fs::weakly_canonical(path, ec).string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    w = loaded_[key];
    if (!w) {
      w = load_drafter(path);
      loaded_[key] = w;
    }
  }
  const BackboneConfig& c = w->backbone.c;
  check(c.hidden == ctx.desc->hidden, "lilicorr: ", path, ": the drafter is ", c.hidden,
        " wide (hidden_size), the target ", ctx.desc->hidden, ": a drafter embeds with the target's table");
  check(ctx.embedding->cols() == c.hidden, "lilicorr: the target's embedding is ", ctx.embedding->cols(),
        " wide, expected ", c.hidden);
  check(c.mask_token < ctx.vocab, "lilicorr: ", path, ": mask_token_id ", c.mask_token,
        " is outside the target's vocabulary of ", ctx.vocab);
  for (int l : c.target_layers)
    check(l < int(ctx.desc->layers.size()), "lilicorr: ", path, ": target_layer_ids names layer ", l,
          ", the target has ", ctx.desc->layers.size());
  if (!w->embed.empty())
    check(w->embed.out == ctx.vocab && w->embed.in == ctx.desc->hidden, "lilicorr: ", path,
          ": tensor 'embed_tokens.weight' is [", w->embed.out, ", ", w->embed.in, "], the target's vocabulary and width ",
          "are [", ctx.vocab, ", ", ctx.desc->hidden, "]");
  if (w->head)
    check(w->head->c.topk <= ctx.vocab, "lilicorr: ", path, ": candidate top-", w->head->c.topk,
          " exceeds the target's vocabulary of ", ctx.vocab);
  OnTarget dw;
  {
    std::lock_guard<std::mutex> lock(mu_);
    OnTarget& slot = on_target_[{key, ctx.target->serial()}];
    if (!slot.backbone) {
      slot.backbone = load_device_weights(w->backbone, *ctx.target);
      if (w->head) slot.head = load_device_head(*w->head, *ctx.target);
      if (!w->embed.empty()) {
        auto t = std::make_shared<DeviceTable>();
        t->table = load_linear(t->src, *ctx.target, "embed_tokens", w->embed);
        slot.embed = std::move(t);
      }
    }
    dw = slot;
  }
  return std::make_unique<LiliDrafter>(ctx, std::move(w), dw, o);
}

void LiliFactory::synthesize(const std::string& path, const ModelDesc& target, SpeculatorSettings& settings,
                             uint64_t seed) {
  const std::string geometry = settings.text("geometry", "tiny");
  const std::string names = settings.text("names", "export");
  const std::string dtype = settings.text("dtype", "bf16");
  const bool head = settings.flag("head", true);
  const bool embed = settings.flag("embed", false);
  const std::string quant = settings.text("quant", "none");
  const std::string exclude = settings.text("exclude", "");
  settings.finish();
  check(quant == "none" || quant == "nvfp4" || quant == "mlx-nvfp4", "lilicorr synthesis: key 'quant' must be none, ",
        "nvfp4 or mlx-nvfp4, found '", quant, "'");
  check(names == "export" || names == "serving", "lilicorr synthesis: key 'names' must be export or serving, found '",
        names, "'");
  check(dtype == "bf16" || dtype == "f32", "lilicorr synthesis: key 'dtype' must be bf16 or f32, found '", dtype, "'");
  SynthGeometry g = synth_geometry(geometry, target);
  g.serving_names = names == "serving";
  g.bf16 = dtype == "bf16";
  g.with_head = head;
  g.embed = embed;
  g.quant = quant;
  for (size_t at = 0; at < exclude.size();) {  // patterns separated by '|' (',' separates settings)
    const size_t bar = std::min(exclude.find('|', at), exclude.size());
    if (bar > at) g.exclude.push_back(exclude.substr(at, bar - at));
    at = bar + 1;
  }
  write_synthetic(path, g, seed);
}

}  // namespace tandem::lilicorr
