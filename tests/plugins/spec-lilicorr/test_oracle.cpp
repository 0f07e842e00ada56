// The lilicorr drafter against an independent reference (issue #20; spec/lilicorr.md, oracle plan):
// a random LiLiCorr checkpoint on the tiny fixture target (tests/fixtures/hf/latent), driven over a
// fixed committed sequence in two schedules — the acceptances greedy verification gives ("natural")
// and forced partial acceptances ("forced") — compared step by step with the vectors that
// tools/reference/lilicorr_ref.py computed with z-lab's DFlash forward and the TensorRT-LLM /
// Model-Optimizer LiLiCorr heads (tests/fixtures/lilicorr/README.md says how they were made).
//
// LilicorrOracle.DumpInputs writes what the reference reads (the sequence, the target's taps, its
// embedding and LM head, the schedules, the drafter checkpoint) into $TANDEM_LILICORR_DUMP and skips
// without it. LilicorrOracle.MatchesTheReference reads $TANDEM_LILICORR_REF, else the committed
// fixture, and skips while neither exists. tools/reference/lilicorr_oracle.sh runs both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "drafter.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

constexpr uint64_t kSeed = 20;         // the drafter checkpoint's synthesis seed
constexpr int kPromptLen = 12;         // prompt_200.txt's first tokens
constexpr int kContinuation = 52;      // greedy tokens after it: the committed sequence is 64 long
constexpr int kMaxSteps = 14;          // proposals per schedule
const int kForced[] = {0, 3, 7, 1, 2, 5, 0, 6, 4, 7, 1, 0, 3, 2};  // accepted drafts per step
const char* const kCases[] = {"natural", "forced"};

// Tolerances (fp32 on both sides, different summation orders).
constexpr double kRowTol = 1e-4;       // context rows, backbone rows, log-probabilities: abs + rel
constexpr double kScoreTol = 2e-4;     // start / pair scores (|score| ≤ logit_scale = 8): abs
constexpr double kTieGap = 1e-3;       // candidate ranks closer than this in log-probability may swap
constexpr double kMargin = 1e-2;       // drafts must agree where the reference's top-2 margin exceeds it

std::unique_ptr<Model> load_target() {
  LoadOptions o;
  o.path = test::data_path("hf/latent");
  o.device = "cpu";
  auto m = Model::load(o, test::registry());
  set_thread_count(1);
  return m;
}

std::string synthesize(const std::string& path, const ModelDesc& target, bool head) {
  LiliFactory f;
  SpeculatorSettings s("", "draft.lilicorr", {{"geometry", "tiny"}, {"head", head ? "true" : "false"}});
  f.synthesize(path, target, s, kSeed);
  return path;
}

SpeculatorContext context(Model& m) {
  SpeculatorContext c;
  c.vocab = m.desc().vocab;
  c.target = &m;
  c.backend = &m.backend();
  c.desc = &m.desc();
  c.embedding = &m.embedding();
  c.lm_head = &m.lm_head();
  c.final_norm = m.final_norm();
  return c;
}

// The committed sequence and the concatenated taps of every position ([N, taps·H], the drafter's
// target_layer_ids order), on the target's backend one buffer per tap for TargetHidden.
class Feeder {
 public:
  Feeder(Backend& b, const std::vector<int>& layers, const std::vector<int32_t>& tokens, const std::vector<float>& feats,
         int64_t H)
      : layers_(layers), tokens_(tokens) {
    const int64_t N = int64_t(tokens.size()), taps = int64_t(layers.size());
    std::vector<float> one(size_t(N * H));
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t r = 0; r < N; ++r)
        std::copy(feats.begin() + (r * taps + t) * H, feats.begin() + (r * taps + t + 1) * H, one.begin() + r * H);
      bufs_.push_back(b.alloc(one.size() * sizeof(float)));
      b.upload(bufs_.back()->data(), one.data(), one.size() * sizeof(float));
      all_.push_back(Tensor::f32(static_cast<float*>(bufs_.back()->data()), N, H));
    }
  }
  TargetHidden rows(int64_t pos0, int64_t n) const {
    TargetHidden h;
    h.pos0 = pos0, h.rows = n, h.layers = layers_;
    for (const Tensor& t : all_) h.states.push_back(t.slice_rows(pos0, n));
    return h;
  }
  // Starts `d` with `n` committed tokens (the taps of the first n − 1 positions), as after a prefill
  // of n − 1 tokens and the target's first token.
  void start(Speculator& d, int64_t n) const {
    d.begin(tokens_.data(), size_t(n - 1));
    d.observe_prompt(rows(0, n - 1));
    d.observe(tokens_.data() + n - 1, 1);
  }
  // Commits tokens [n, n + c) (accepted drafts, then the target's token) with the taps of their
  // predecessors' positions n − 1 … n + c − 2.
  void commit(Speculator& d, int64_t n, int64_t c) const {
    d.observe_hidden(tokens_.data() + n, size_t(c), rows(n - 1, c));
  }

 private:
  std::vector<int> layers_;
  const std::vector<int32_t>& tokens_;
  std::vector<std::unique_ptr<Buffer>> bufs_;
  std::vector<Tensor> all_;
};

// --- a small safetensors file of F32 / I32 tensors ----------------------------------------------

struct Out {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<uint8_t>> bytes;
  template <class T>
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    check(n == int64_t(v.size()), "oracle dump: tensor '", name, "' holds ", v.size(), " values, its shape ", n);
    specs.push_back({name, dtype, std::move(shape)});
    bytes.emplace_back(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data() + n));
  }
  void write(const std::string& path) const {
    safetensors::SafetensorsWriter w;
    auto f = w.create(path, specs, FileInfo{});
    for (const auto& b : bytes) f->write(b.data(), b.size());
    f->close();
  }
};

class In {
 public:
  explicit In(const std::string& path) : path_(path), ck_(safetensors::open_checkpoint(path)) {}
  template <class T>
  std::vector<T> get(const std::string& name, const char* dtype, std::vector<int64_t> shape = {}) const {
    const RawTensor* r = ck_->find(name);
    check(r != nullptr, path_, ": tensor '", name, "' is missing");
    check(r->dtype == dtype, path_, ": tensor '", name, "' is ", r->dtype, ", expected ", dtype);
    check(shape.empty() || r->shape == shape, path_, ": tensor '", name, "' is ", shape_str(r->shape), ", expected ",
          shape_str(shape));
    std::vector<T> v(r->nbytes / sizeof(T));
    std::memcpy(v.data(), r->data, v.size() * sizeof(T));
    return v;
  }
  std::vector<float> f32(const std::string& n, std::vector<int64_t> s = {}) const { return get<float>(n, "F32", s); }
  std::vector<int32_t> i32(const std::string& n, std::vector<int64_t> s = {}) const { return get<int32_t>(n, "I32", s); }
  std::vector<int64_t> shape(const std::string& name) const {
    const RawTensor* r = ck_->find(name);
    check(r != nullptr, path_, ": tensor '", name, "' is missing");
    return r->shape;
  }

 private:
  std::string path_;
  std::unique_ptr<Checkpoint> ck_;
};

// The taps of every position of `tokens` from one prefill of the target, [N, taps·H] in `layers` order.
std::vector<float> target_feats(Model& m, const std::vector<int>& layers, const std::vector<int32_t>& tokens) {
  m.set_taps(layers);
  const int64_t N = int64_t(tokens.size()), H = m.desc().hidden, taps = int64_t(layers.size());
  auto seq = m.new_sequence(N + 8);
  std::vector<float> logits;
  m.forward(*seq, tokens, ForwardMode::Prefill, logits, false);
  std::vector<float> feats(size_t(N * taps * H)), one(size_t(N * H));
  for (int64_t t = 0; t < taps; ++t) {
    const auto& sorted = m.taps();
    const size_t j = size_t(std::find(sorted.begin(), sorted.end(), layers[size_t(t)]) - sorted.begin());
    const Tensor s = m.tap(j);
    check(s.rows == N && s.cols == H, "oracle dump: tap of layer ", layers[size_t(t)], " is ", s.rows, "×", s.cols);
    m.backend().download(one.data(), s.data, s.nbytes());
    for (int64_t r = 0; r < N; ++r)
      std::copy(one.begin() + r * H, one.begin() + (r + 1) * H, feats.begin() + (r * taps + t) * H);
  }
  return feats;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

TEST(LilicorrOracle, DumpInputs) {
  const std::string dir = env("TANDEM_LILICORR_DUMP");
  if (dir.empty()) GTEST_SKIP() << "set TANDEM_LILICORR_DUMP=DIR to write the reference's inputs (tools/reference/lilicorr_oracle.sh)";
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  auto m = load_target();
  const std::string path = synthesize((fs::path(dir) / "drafter").string(), m->desc(), true);

  // The sequence: a prompt and the target's greedy continuation.
  const auto ids = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  std::vector<int32_t> tokens(ids.begin(), ids.begin() + kPromptLen);
  const auto cont = generate(*m, tokens, test::run_options(kContinuation)).tokens;
  ASSERT_EQ(cont.size(), size_t(kContinuation));
  tokens.insert(tokens.end(), cont.begin(), cont.end());
  const int64_t N = int64_t(tokens.size()), H = m->desc().hidden, V = m->desc().vocab;

  SpeculatorContext ctx = context(*m);
  LiliFactory f;
  SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
  auto sp = f.create(ctx, s);
  auto& d = static_cast<LiliDrafter&>(*sp);
  const std::vector<int> layers = d.hidden_layers();
  const std::vector<float> feats = target_feats(*m, layers, tokens);
  Feeder feed(m->backend(), layers, tokens, feats, H);

  Out out;
  for (const char* name : kCases) {
    std::vector<int32_t> committed;
    int64_t n = kPromptLen + 1;
    feed.start(d, n);
    for (int step = 0; step < kMaxSteps; ++step) {
      Draft dr;
      d.propose(7, dr);
      ASSERT_EQ(dr.tokens.size(), size_t(7));
      committed.push_back(int32_t(n));
      int64_t acc = 0;
      if (std::string(name) == "natural") {
        while (acc < 7 && n + acc < N && dr.tokens[size_t(acc)] == tokens[size_t(n + acc)]) ++acc;
      } else {
        acc = kForced[step];
      }
      const int64_t c = std::min<int64_t>(acc + 1, N - n);
      if (c <= 0) break;
      feed.commit(d, n, c);
      n += c;
    }
    std::printf("%s: committed lengths", name);
    for (int32_t c : committed) std::printf(" %d", c);
    std::printf("\n");
    out.add(std::string(name) + ".committed", "I32", {int64_t(committed.size())}, committed);
  }
  std::vector<float> emb(size_t(V * H)), head(size_t(V * H));
  m->embedding().dequantize(emb.data());
  m->lm_head().dequantize(head.data());
  out.add("meta.seed", "I32", {1}, std::vector<int32_t>{int32_t(kSeed)});
  out.add("meta.prompt_len", "I32", {1}, std::vector<int32_t>{kPromptLen});
  out.add("tokens", "I32", {N}, tokens);
  out.add("feats", "F32", {N, int64_t(layers.size()) * H}, feats);
  out.add("embedding", "F32", {V, H}, emb);
  out.add("lm_head", "F32", {V, H}, head);
  out.write((fs::path(dir) / "inputs.safetensors").string());
  std::printf("wrote %s/inputs.safetensors and %s\n", dir.c_str(), path.c_str());
}

// The fitting data of tools/reference/lilicorr_fit.py (tests/fixtures/lilicorr/fitted/README.md):
// the target's greedy continuations of many prompts unlike the drafting tests' (which are prefixes of
// prompt_200.txt): windows of prompt_200.txt from token 24 on, and random tokens), each sequence's
// taps, the target's embedding and LM head, and the synthesized drafter to start from. Writes
// $TANDEM_LILICORR_FIT/{fit.safetensors,drafter/}; skips without it. TANDEM_LILICORR_FIT_SET=tests
// writes instead the drafting tests' own runs (the fixture's set: README there).
constexpr int kFitPrompts = 480;
constexpr int kFitContinuation = 64;

TEST(LilicorrOracle, DumpFitData) {
  const std::string dir = env("TANDEM_LILICORR_FIT");
  if (dir.empty()) GTEST_SKIP() << "set TANDEM_LILICORR_FIT=DIR to write lilicorr_fit.py's data";
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  auto m = load_target();
  const std::string path = synthesize((fs::path(dir) / "drafter").string(), m->desc(), true);
  SpeculatorContext ctx = context(*m);
  LiliFactory f;
  SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
  auto sp = f.create(ctx, s);
  const std::vector<int> layers = static_cast<LiliDrafter&>(*sp).hidden_layers();
  const int64_t H = m->desc().hidden, V = m->desc().vocab, taps = int64_t(layers.size());

  const auto text = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  std::vector<int32_t> all_tokens, prompt_lens, offsets{0};
  std::vector<float> all_feats;
  auto add = [&](std::vector<int32_t> tokens, const GenerateOptions& o) {
    const auto cont = generate(*m, tokens, o).tokens;
    ASSERT_EQ(cont.size(), size_t(o.max_tokens));
    prompt_lens.push_back(int32_t(tokens.size()));
    tokens.insert(tokens.end(), cont.begin(), cont.end());
    const std::vector<float> feats = target_feats(*m, layers, tokens);
    all_tokens.insert(all_tokens.end(), tokens.begin(), tokens.end());
    all_feats.insert(all_feats.end(), feats.begin(), feats.end());
    offsets.push_back(int32_t(all_tokens.size()));
  };
  auto window = [&](size_t at, size_t len) {
    return std::vector<int32_t>(text.begin() + long(at), text.begin() + long(at + len));
  };
  if (env("TANDEM_LILICORR_FIT_SET") == "tests") {
    // The drafting tests' own runs (test_drafting.cpp, the fitted drafter's tests): their greedy
    // prompts, the two fitting-set windows they report, and their seeded sampled runs.
    for (size_t n : {5, 9, 14, 23, 31}) add(window(0, n), test::run_options(kFitContinuation));
    add(window(24, 4), test::run_options(kFitContinuation));
    add(window(38, 6), test::run_options(kFitContinuation));
    for (size_t n : {9, 23})
      for (uint64_t seed = 0; seed < 3; ++seed) {
        GenerateOptions o = test::run_options(48);
        o.sampling.temperature = 0.5f;
        o.sampling.seed = seed;
        add(window(0, n), o);
      }
  } else {
    Rng rng(kSeed);
    for (int i = 0; i < kFitPrompts; ++i) {
      const size_t len = 4 + size_t(i % 13);
      std::vector<int32_t> tokens;
      if (i % 2 == 0) {
        tokens = window(24 + size_t(i * 7) % (text.size() - 24 - len), len);
      } else {
        for (size_t j = 0; j < len; ++j) tokens.push_back(int32_t(rng.next() % uint64_t(V)));
      }
      add(tokens, test::run_options(kFitContinuation));
    }
  }
  const int64_t N = int64_t(all_tokens.size());
  std::vector<float> emb(size_t(V * H)), head(size_t(V * H));
  m->embedding().dequantize(emb.data());
  m->lm_head().dequantize(head.data());
  Out out;
  out.add("meta.seed", "I32", {1}, std::vector<int32_t>{int32_t(kSeed)});
  out.add("offsets", "I32", {int64_t(offsets.size())}, offsets);
  out.add("prompt_lens", "I32", {int64_t(prompt_lens.size())}, prompt_lens);
  out.add("tokens", "I32", {N}, all_tokens);
  out.add("feats", "F32", {N, taps * H}, all_feats);
  out.add("embedding", "F32", {V, H}, emb);
  out.add("lm_head", "F32", {V, H}, head);
  out.write((fs::path(dir) / "fit.safetensors").string());
  std::printf("wrote %s/fit.safetensors (%d sequences, %lld tokens) and %s\n", dir.c_str(), int(prompt_lens.size()),
              (long long)N, path.c_str());
}

// Largest |a − b| / (1 + |b|) over a range.
double max_rel(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])) / (1.0 + std::fabs(double(b[i]))));
  return m;
}

double max_abs(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

TEST(LilicorrOracle, MatchesTheReference) {
  std::string ref = env("TANDEM_LILICORR_REF");
  if (ref.empty()) ref = test::data_path("lilicorr/reference.safetensors");
  if (!std::filesystem::exists(ref))
    GTEST_SKIP() << "no reference vectors at " << ref
                 << " yet: run tools/reference/lilicorr_oracle.sh on the GPU machine and commit its "
                    "reference.safetensors as tests/fixtures/lilicorr/reference.safetensors";
  const In in(ref);
  ASSERT_EQ(in.i32("meta.seed", {1})[0], int32_t(kSeed)) << ref << " was made for another drafter seed";
  auto m = load_target();
  test::TempDir dir("lilicorr-oracle");
  const std::string path = synthesize(dir.file("lili"), m->desc(), true);
  const std::string plain = synthesize(dir.file("plain"), m->desc(), false);
  SpeculatorContext ctx = context(*m);
  LiliFactory f;
  SpeculatorSettings s1("", "draft.lilicorr", {{"path", path}}), s2("", "draft.lilicorr", {{"path", plain}});
  auto sp = f.create(ctx, s1), sp_plain = f.create(ctx, s2);
  auto& d = static_cast<LiliDrafter&>(*sp);
  auto& dp = static_cast<LiliDrafter&>(*sp_plain);
  const std::shared_ptr<const DrafterWeights> w = load_drafter(path);
  const HeadConfig& hc = w->head->c;
  const int64_t H = m->desc().hidden, S = hc.slots(), K = hc.topk, taps = int64_t(d.hidden_layers().size());

  const std::vector<int32_t> tokens = in.i32("tokens");
  const int64_t N = int64_t(tokens.size());
  const std::vector<float> feats = in.f32("feats", {N, taps * H});
  Feeder feed(m->backend(), d.hidden_layers(), tokens, feats, H);

  // Context rows of every position.
  std::vector<float> ctx_rows;
  context_rows(w->backbone, feats.data(), N, ctx_rows);
  const std::vector<float> ref_ctx = in.f32("ctx", {N, H});
  const double ctx_err = max_rel(ctx_rows.data(), ref_ctx.data(), ref_ctx.size());
  EXPECT_LE(ctx_err, kRowTol) << "context rows hidden_norm(fc(taps))";

  int64_t slots_total = 0, drafts_compared = 0, cand_compared = 0, cand_total = 0, argmax_compared = 0;
  double rows_err = 0, logp_err = 0, score_err = 0;
  for (const char* name : kCases) {
    const std::string c = name;
    const std::vector<int32_t> committed = in.i32(c + ".committed");
    const int64_t T = int64_t(committed.size());
    const auto rows = in.f32(c + ".rows", {T, S, H});
    const auto cand = in.i32(c + ".cand", {T, S, K});
    const auto logp = in.f32(c + ".logp", {T, S, K + 1});
    const auto start = in.f32(c + ".start", {T, K});
    const auto pairs = in.f32(c + ".pairs", {T, S - 1, K, K});
    const auto path_ref = in.i32(c + ".path", {T, S});
    const auto drafts = in.i32(c + ".drafts", {T, S});
    const auto margin = in.f32(c + ".margin", {T, S});
    const auto argmax = in.i32(c + ".argmax", {T, S});
    const auto argmax_margin = in.f32(c + ".argmax_margin", {T, S});
    ASSERT_GT(T, 0);
    feed.start(d, committed[0]);
    feed.start(dp, committed[0]);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = committed[size_t(i)];
      if (i > 0) {
        const int64_t prev = committed[size_t(i - 1)];
        ASSERT_GT(n, prev) << c << " step " << i;
        feed.commit(d, prev, n - prev);
        feed.commit(dp, prev, n - prev);
      }
      Draft got, got_plain;
      d.propose(int(S), got);
      dp.propose(int(S), got_plain);
      const std::string at = c + " step " + std::to_string(i) + " (" + std::to_string(n) + " committed)";
      ASSERT_EQ(d.context_rows(), n - 1) << at << ": only committed rows enter the context";
      const struct {
        std::vector<float> rows;
        const std::vector<int32_t>& cand;
        const std::vector<float>& logp;
        const HeadScores& scores;
        const std::vector<int>& path;
      } t{d.backbone_rows(), d.last_candidates(), d.last_logp(), d.last_scores(), d.last_path()};

      const double re = max_rel(t.rows.data(), rows.data() + i * S * H, size_t(S * H));
      rows_err = std::max(rows_err, re);
      EXPECT_LE(re, kRowTol) << at << ": backbone rows";
      // Candidates: each rank whose log-probability is clear of its neighbours; the sorted values always.
      std::vector<bool> slot_ok(size_t(S), true);
      for (int64_t sl = 0; sl < S; ++sl) {
        const float* l = logp.data() + (i * S + sl) * (K + 1);
        const double le = max_abs(t.logp.data() + sl * K, l, size_t(K));
        logp_err = std::max(logp_err, le);
        EXPECT_LE(le, kRowTol * (1.0 + std::fabs(l[0]))) << at << ": log-probabilities of slot " << sl;
        for (int64_t k = 0; k < K; ++k) {
          ++cand_total;
          const double gap = std::min(k > 0 ? double(l[k - 1] - l[k]) : 1e30, double(l[k] - l[k + 1]));
          if (gap <= kTieGap) {
            slot_ok[size_t(sl)] = false;
            continue;
          }
          ++cand_compared;
          EXPECT_EQ(t.cand[size_t(sl * K + k)], cand[size_t((i * S + sl) * K + k)]) << at << ": candidate " << sl << "," << k;
          if (t.cand[size_t(sl * K + k)] != cand[size_t((i * S + sl) * K + k)]) slot_ok[size_t(sl)] = false;
        }
      }
      // Scores where the lattice is the same on both sides.
      if (slot_ok[0]) {
        const double se = max_abs(t.scores.start.data(), start.data() + i * K, size_t(K));
        score_err = std::max(score_err, se);
        EXPECT_LE(se, kScoreTol) << at << ": start scores";
      }
      for (int64_t sl = 0; sl + 1 < S; ++sl)
        if (slot_ok[size_t(sl)] && slot_ok[size_t(sl + 1)]) {
          const double se = max_abs(t.scores.pairs.data() + sl * K * K, pairs.data() + (i * (S - 1) + sl) * K * K,
                                    size_t(K * K));
          score_err = std::max(score_err, se);
          EXPECT_LE(se, kScoreTol) << at << ": pair scores " << sl;
        }
      // Drafts: the walk's prefix while the reference's choice is clear.
      slots_total += S;
      for (int64_t sl = 0; sl < S; ++sl) {
        if (!slot_ok[size_t(sl)] || margin[size_t(i * S + sl)] <= kMargin) break;
        ++drafts_compared;
        EXPECT_EQ(t.path[size_t(sl)], path_ref[size_t(i * S + sl)]) << at << ": walk at slot " << sl;
        EXPECT_EQ(got.tokens[size_t(sl)], drafts[size_t(i * S + sl)]) << at << ": draft " << sl;
      }
      // The backbone's own argmax drafts (a checkpoint without the head, the same backbone bits).
      for (int64_t sl = 0; sl < S; ++sl)
        if (argmax_margin[size_t(i * S + sl)] > kMargin) {
          ++argmax_compared;
          EXPECT_EQ(got_plain.tokens[size_t(sl)], argmax[size_t(i * S + sl)]) << at << ": argmax draft " << sl;
        }
    }
  }
  std::printf("lilicorr vs reference %s: ctx rows %.2e, backbone rows %.2e, log-probs %.2e (rel), scores %.2e (abs); "
              "candidates compared %lld of %lld, drafts %lld of %lld slots, argmax drafts %lld\n",
              ref.c_str(), ctx_err, rows_err, logp_err, score_err, (long long)cand_compared, (long long)cand_total,
              (long long)drafts_compared, (long long)slots_total, (long long)argmax_compared);
  // Not vacuous: most of the lattice and a good share of the drafts were really compared.
  EXPECT_GE(cand_compared * 2, cand_total) << "candidate ranks too close to compare";
  EXPECT_GE(drafts_compared * 4, slots_total) << "too few drafts cleared the margin to compare";
}

}  // namespace
