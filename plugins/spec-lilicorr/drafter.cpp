// The lilicorr speculator (drafter.h): context rows from the taps, the full block every step, the
// head's greedy walk (or the backbone's argmax), cut to what the loop asked for.
#include "drafter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "synth.h"
#include "tandem/error.h"
#include "tandem/weights.h"

namespace tandem::lilicorr {

LiliDrafter::LiliDrafter(const SpeculatorContext& ctx, std::shared_ptr<const DrafterWeights> w)
    : ctx_(ctx), w_(std::move(w)) {
  const BackboneConfig& c = w_->backbone.c;
  const int64_t S = c.block - 1, K = w_->head ? w_->head->c.topk : 0;
  // Every buffer now: none comes or goes while the target records graphs.
  rows_dev_ = ctx_.backend->alloc(size_t(S * c.hidden) * sizeof(float));
  logits_dev_ = ctx_.backend->alloc(size_t(S * ctx_.vocab) * sizeof(float));
  emb_dev_ = ctx_.backend->alloc(size_t(std::max<int64_t>(c.block, S * K) * c.hidden) * sizeof(float));
}

void LiliDrafter::begin(const int32_t* prompt, size_t n) {
  cache_.clear();
  pending_.clear();
  pending_rows_ = 0;
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
  // Host copies of the taps (the drafter's math runs on the host; Backend::download waits for the pass).
  const size_t base = pending_.size();
  pending_.resize(base + size_t(h.rows * taps * H));
  host_.resize(size_t(h.rows * H));
  for (int64_t t = 0; t < taps; ++t) {
    const Tensor& s = h.states[size_t(t)];
    check(s.rows == h.rows && s.cols == H && s.dtype == DType::F32, "lilicorr: tapped layer ", h.layers[size_t(t)],
          " arrived as ", s.rows, "×", s.cols, ", expected ", h.rows, "×", H, " f32");
    ctx_.backend->download(host_.data(), s.data, s.nbytes());
    for (int64_t r = 0; r < h.rows; ++r)
      std::copy(host_.begin() + r * H, host_.begin() + (r + 1) * H,
                pending_.begin() + int64_t(base) + (r * taps + t) * H);
  }
  pending_rows_ += h.rows;
  fed_ += h.rows;
}

void LiliDrafter::flush() {
  if (pending_rows_ == 0) return;
  append_context(w_->backbone, pending_.data(), pending_rows_, cache_);
  pending_.clear();
  pending_rows_ = 0;
}

void LiliDrafter::lm_head(const std::vector<float>& rows, int64_t n, std::vector<float>& logits) {
  const int64_t H = w_->backbone.c.hidden, V = ctx_.vocab;
  ctx_.backend->upload(rows_dev_->data(), rows.data(), size_t(n * H) * sizeof(float));
  Tensor x = Tensor::f32(static_cast<float*>(rows_dev_->data()), n, H);
  Tensor y = Tensor::f32(static_cast<float*>(logits_dev_->data()), n, V);
  ctx_.lm_head->matmul(x, y);
  logits.resize(size_t(n * V));
  ctx_.backend->download(logits.data(), y.data, y.nbytes());
}

void LiliDrafter::propose(int max_n, Draft& out) {
  out.clear();
  // Drafts need every committed position but the last one fed (the anchor has no row yet).
  if (max_n <= 0 || last_ < 0 || fed_ == 0 || fed_ != committed_ - 1) return;
  flush();
  const BackboneWeights& bw = w_->backbone;
  const BackboneConfig& c = bw.c;
  const int64_t B = c.block, S = B - 1, H = c.hidden, V = ctx_.vocab;

  // The block [anchor, mask × (B − 1)], embedded by the target's table.
  std::vector<int32_t> ids(size_t(B), c.mask_token);
  ids[0] = last_;
  BlockTrace& t = trace_;
  t.start = cache_.rows;
  t.cand.clear(), t.logp.clear(), t.scores = HeadScores{}, t.path.clear();
  std::vector<float>& rows = t.rows;
  std::vector<float> x(size_t(B * H)), logits;
  Tensor e = Tensor::f32(static_cast<float*>(emb_dev_->data()), B, H);
  ctx_.embedding->get_rows(ids.data(), int(B), e);
  ctx_.backend->download(x.data(), e.data, e.nbytes());
  if (c.embedding_scale != 1.0f)
    for (float& v : x) v *= c.embedding_scale;
  run_block(bw, cache_, std::move(x), rows);
  lm_head(rows, S, logits);
  for (float& v : logits) {
    v *= c.output_multiplier;
    if (c.softcap > 0) v = c.softcap * std::tanh(v / c.softcap);
  }

  block_.assign(size_t(S), 0);
  if (!w_->head) {
    for (int64_t s = 0; s < S; ++s) {
      const float* l = logits.data() + s * V;
      block_[size_t(s)] = int32_t(std::max_element(l, l + V) - l);
    }
  } else {
    const HeadWeights& hw = *w_->head;
    const int64_t K = hw.c.topk;
    // Top-K of log_softmax over the whole vocabulary, descending (lowest id first on ties).
    std::vector<int32_t>& cand = t.cand;
    std::vector<float>& logp = t.logp;
    cand.assign(size_t(S * K), 0);
    logp.assign(size_t(S * K), 0.0f);
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (int64_t s = 0; s < S; ++s) {
      const float* l = logits.data() + s * V;
      const float mx = *std::max_element(l, l + V);
      double sum = 0.0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i] - mx));
      const float lse = mx + float(std::log(sum));
      for (int64_t i = 0; i < V; ++i) order[size_t(i)] = int32_t(i);
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      for (int64_t k = 0; k < K; ++k) {
        cand[size_t(s * K + k)] = order[size_t(k)];
        logp[size_t(s * K + k)] = l[order[size_t(k)]] - lse;
      }
    }
    std::vector<float> emb(size_t(S * K * H));
    Tensor ce = Tensor::f32(static_cast<float*>(emb_dev_->data()), S * K, H);
    ctx_.embedding->get_rows(cand.data(), int(S * K), ce);
    ctx_.backend->download(emb.data(), ce.data, ce.nbytes());
    score(hw, int(S), emb.data(), logp.data(), rows.data(), cache_.last_row.data(), true, t.scores);
    t.path = greedy_path(t.scores, int(S), int(K));
    const std::vector<int>& path = t.path;
    for (int64_t s = 0; s < S; ++s) block_[size_t(s)] = cand[size_t(s * K + path[size_t(s)])];
  }
  // The full block ran (its bidirectional rows depend on its width); the loop gets what it asked for.
  out.tokens.assign(block_.begin(), block_.begin() + std::min<int64_t>(max_n, S));
}

std::unique_ptr<Speculator> LiliFactory::create(const SpeculatorContext& ctx, SpeculatorSettings& settings) {
  std::string path = settings.text("path", "");
  settings.finish();
  check(!path.empty(), settings.source().empty() ? "" : settings.source() + ": ",
        "key 'draft.lilicorr.path' is required (the drafter's checkpoint folder)");
  namespace fs = std::filesystem;
  if (fs::path(path).is_relative() && !settings.source().empty())
    path = (fs::path(settings.source()).parent_path() / path).string();
  check(ctx.backend && ctx.desc && ctx.embedding && ctx.lm_head, "lilicorr: the drafter needs the target's backend, ",
        "shapes, embedding and LM head (SpeculatorContext incomplete)");
  std::shared_ptr<const DrafterWeights> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::error_code ec;
    const std::string key = fs::weakly_canonical(path, ec).string();
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
  if (w->head)
    check(w->head->c.topk <= ctx.vocab, "lilicorr: ", path, ": candidate top-", w->head->c.topk,
          " exceeds the target's vocabulary of ", ctx.vocab);
  return std::make_unique<LiliDrafter>(ctx, std::move(w));
}

void LiliFactory::synthesize(const std::string& path, const ModelDesc& target, SpeculatorSettings& settings,
                             uint64_t seed) {
  const std::string geometry = settings.text("geometry", "tiny");
  const std::string names = settings.text("names", "export");
  const std::string dtype = settings.text("dtype", "bf16");
  const bool head = settings.flag("head", true);
  settings.finish();
  check(names == "export" || names == "serving", "lilicorr synthesis: key 'names' must be export or serving, found '",
        names, "'");
  check(dtype == "bf16" || dtype == "f32", "lilicorr synthesis: key 'dtype' must be bf16 or f32, found '", dtype, "'");
  SynthGeometry g = synth_geometry(geometry, target);
  g.serving_names = names == "serving";
  g.bf16 = dtype == "bf16";
  g.with_head = head;
  write_synthetic(path, g, seed);
}

}  // namespace tandem::lilicorr
