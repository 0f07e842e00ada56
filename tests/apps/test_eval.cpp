// `tandem eval` and `tandem inspect --dequantize` run as a user would, checked against numbers this
// test computes itself from the engine's logits (in double, from the f32 logits) and from the
// formats' own CPU dequantizers: a model against itself (KL 0, top-1 1), a GGUF Q8_0 copy with
// flipped bits against its BF16 original, a saved reference file, and one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "eval_logprobs.h"
#include "formats/gguf/gguf_writer.h"
#include "run_program.h"
#include "test_util.h"
#include "tests/formats/gguf/oracle/oracle_model.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/weights.h"
#include "tiny_chat_model.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

test::ProgramRun run(const std::string& args) { return test::run_program("tandem", args); }

PluginRegistry& plugins() {
  static PluginRegistry reg;
  static bool loaded = false;
  if (!loaded) reg.load_directory(test::plugin_dir()), loaded = true;
  return reg;
}

std::unique_ptr<Model> load(const std::string& path) {
  LoadOptions o;
  o.path = path;
  return Model::load(o, plugins());
}

// The numbers of `tandem eval --json`, by key (the file is flat but for per_layer).
std::map<std::string, double> read_json(const std::string& path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, double> out;
  for (const char* k : {"rows", "row_tokens", "positions", "perplexity", "mean_nll", "ref_perplexity", "mean_kl",
                        "max_kl", "top1", "top1_same"}) {
    auto at = s.find(std::string("\"") + k + "\": ");
    if (at != std::string::npos) out[k] = std::strtod(s.c_str() + at + std::strlen(k) + 4, nullptr);
  }
  return out;
}

// What eval should report, computed here from full logits in double.
struct Expected {
  int64_t positions = 0;
  double nll_model = 0, nll_ref = 0, kl = 0;
  int64_t top1_same = 0;
};

std::vector<double> log_softmax64(const float* x, int V) {
  double mx = x[0], sum = 0;
  for (int v = 1; v < V; ++v) mx = std::max(mx, double(x[v]));
  for (int v = 0; v < V; ++v) sum += std::exp(double(x[v]) - mx);
  std::vector<double> out(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) out[size_t(v)] = double(x[v]) - mx - std::log(sum);
  return out;
}

std::vector<float> logits_of(Model& m, const std::vector<int32_t>& row) {
  auto seq = m.new_sequence(int64_t(row.size()));
  std::vector<float> logits;
  m.forward(*seq, row, ForwardMode::Prefill, logits, true);
  return logits;
}

Expected expected(Model& model, Model* ref, const std::vector<std::vector<int32_t>>& rows, int first) {
  Expected e;
  const int V = model.desc().vocab;
  for (const auto& row : rows) {
    std::vector<float> lm = logits_of(model, row), lr = ref ? logits_of(*ref, row) : std::vector<float>{};
    for (size_t p = size_t(first); p + 1 < row.size(); ++p) {
      const float* xm = lm.data() + p * size_t(V);
      auto pm = log_softmax64(xm, V);
      ++e.positions;
      e.nll_model -= pm[size_t(row[p + 1])];
      if (!ref) continue;
      const float* xr = lr.data() + p * size_t(V);
      auto pr = log_softmax64(xr, V);
      e.nll_ref -= pr[size_t(row[p + 1])];
      for (int v = 0; v < V; ++v) e.kl += std::exp(pr[size_t(v)]) * (pr[size_t(v)] - pm[size_t(v)]);
      e.top1_same += std::max_element(xm, xm + V) - xm == std::max_element(xr, xr + V) - xr;
    }
  }
  return e;
}

std::string write_tokens(const std::string& path, const std::vector<int32_t>& ids) {
  std::ofstream f(path);
  for (int32_t t : ids) f << t << ' ';
  return path;
}

// A GGUF Q8_0 model with bits flipped in its expert weights, and its unflipped BF16 HF folder.
struct PerturbedPair {
  std::string gguf, hf;
};
PerturbedPair perturbed_pair(const test::TempDir& dir) {
  gguf::oracle::OracleSpec s;
  s.name = "eval";
  s.seed = 5;
  s.uniform_type = 8;  // Q8_0 from the same bf16 values the HF folder holds
  gguf::oracle::OracleModel m = gguf::oracle::build_oracle_model(s);
  gguf::oracle::write_hf_folder(m, dir.path());
  EXPECT_GT(gguf::oracle::corrupt_tested(m), 0);
  gguf::write_gguf(dir.file("perturbed.gguf"), m.metadata, m.tensors);
  return {dir.file("perturbed.gguf"), dir.path()};
}

std::vector<std::vector<int32_t>> cut(const std::vector<int32_t>& ids, int rows, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < rows; ++r) out.emplace_back(ids.begin() + r * n, ids.begin() + (r + 1) * n);
  return out;
}

const char kText[] =
    "The Nemotron-H models interleave Mamba-2 layers with a few attention layers and mixture-of-experts "
    "feed-forward blocks. Quantized packs trade a little accuracy for memory; the model cards measure the "
    "loss as the KL divergence from the BF16 model, the share of positions whose likeliest token agrees, "
    "and perplexity on a held-out text.";

}  // namespace

// The tiny chat model against itself, through its byte-level tokenizer: KL exactly 0, top-1 1, and the
// perplexity of every position but each row's first, as computed here from the model's logits.
TEST(Eval, ModelAgainstItself) {
  test::TempDir dir("tandem_eval_self");
  auto m = test::write_tiny_chat_model(dir.file("chat"),
                                       test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  std::ofstream(dir.file("text.txt")) << kText;
  const int R = 3, N = 48;
  auto r = run("eval --config " + m.profile + " --text " + dir.file("text.txt") + " --rows 3 --row-tokens 48 --ref-config " +
               m.profile + " --json " + dir.file("out.json"));
  fs::remove(m.profile);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("top-1 agreement"), std::string::npos) << r.out;
  auto j = read_json(dir.file("out.json"));
  // The tokenizer has no merges and adds no BOS: the ids are the text's bytes.
  std::vector<int32_t> ids;
  for (unsigned char c : std::string(kText)) ids.push_back(test::kTinyFirstByte + c);
  auto model = load(m.dir);
  Expected e = expected(*model, nullptr, cut(ids, R, N), 0);
  EXPECT_EQ(j["positions"], double(R * (N - 1)));
  EXPECT_EQ(j["mean_kl"], 0.0);
  EXPECT_EQ(j["max_kl"], 0.0);
  EXPECT_EQ(j["top1"], 1.0);
  const double ppl = std::exp(e.nll_model / double(e.positions));
  std::printf("self: perplexity %.9g (here %.9g)\n", j["perplexity"], ppl);
  EXPECT_NEAR(j["perplexity"] / ppl, 1.0, 1e-6);
  EXPECT_EQ(j["perplexity"], j["ref_perplexity"]);
}

// A perturbed copy (GGUF Q8_0 with bits flipped in its experts) against its BF16 original: KL > 0 and
// top-1 < 1, matching this test's own computation from both models' logits; the same numbers from a
// saved reference file as from the in-process reference; llama-perplexity's second-half scoring.
TEST(Eval, PerturbedCopyAgainstOriginal) {
  test::TempDir dir("tandem_eval_pert");
  PerturbedPair pair = perturbed_pair(dir);
  const int R = 4, N = 40;
  auto prompts = gguf::oracle::oracle_prompts({R * N + 7}, 3);
  const std::string tok = write_tokens(dir.file("tokens.txt"), prompts[0]);
  const std::string common = " --tokens " + tok + " --rows 4 --row-tokens 40";
  auto in_process = run("eval --model " + pair.gguf + " --ref-model " + pair.hf + common + " --json " + dir.file("a.json"));
  ASSERT_EQ(in_process.status, 0) << in_process.err;
  auto saved = run("eval --model " + pair.hf + common + " --save-logits " + dir.file("ref.tlp"));
  ASSERT_EQ(saved.status, 0) << saved.err;
  auto from_file = run("eval --model " + pair.gguf + " --tokens " + tok + " --ref-logits " + dir.file("ref.tlp") +
                       " --json " + dir.file("b.json"));
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  auto a = read_json(dir.file("a.json")), b = read_json(dir.file("b.json"));

  auto model = load(pair.gguf), ref = load(pair.hf);
  Expected e = expected(*model, ref.get(), cut(prompts[0], R, N), 0);
  std::printf("perturbed: KL %.6g (here %.6g), top-1 %.4f (here %.4f), perplexity %.6g (here %.6g)\n", a["mean_kl"],
              e.kl / double(e.positions), a["top1"], double(e.top1_same) / double(e.positions), a["perplexity"],
              std::exp(e.nll_model / double(e.positions)));
  EXPECT_EQ(a["positions"], double(R * (N - 1)));
  EXPECT_GT(a["mean_kl"], 1e-3);
  EXPECT_LT(a["top1"], 1.0);
  // eval stores log-probabilities as f32 (rounded once from double): 1e-7 of each, so 1e-5 of KL.
  EXPECT_NEAR(a["mean_kl"] / (e.kl / double(e.positions)), 1.0, 1e-5);
  EXPECT_EQ(a["top1_same"], double(e.top1_same));
  EXPECT_NEAR(a["perplexity"] / std::exp(e.nll_model / double(e.positions)), 1.0, 1e-6);
  EXPECT_NEAR(a["ref_perplexity"] / std::exp(e.nll_ref / double(e.positions)), 1.0, 1e-6);
  // The saved file holds the same f32 log-probabilities the in-process reference kept.
  for (const char* k : {"positions", "perplexity", "ref_perplexity", "mean_kl", "max_kl", "top1"})
    EXPECT_EQ(a[k], b[k]) << k;
  cli::LogprobReader f(dir.file("ref.tlp"));
  EXPECT_EQ(f.header().vocab, ref->desc().vocab);
  EXPECT_EQ(f.header().rows, R);
  EXPECT_EQ(f.header().row_tokens, N);
  EXPECT_EQ(f.tokens(), std::vector<int32_t>(prompts[0].begin(), prompts[0].begin() + R * N));
  std::vector<float> row;
  f.read_row(2, row);
  auto lr = logits_of(*ref, cut(prompts[0], R, N)[2]);
  auto want = log_softmax64(lr.data() + 5 * size_t(ref->desc().vocab), ref->desc().vocab);
  for (size_t v = 0; v < want.size(); ++v) ASSERT_EQ(row[5 * want.size() + v], float(want[v])) << v;

  // Second half: positions N/2 … N−2 of each row.
  auto half = run("eval --model " + pair.gguf + " --ref-logits " + dir.file("ref.tlp") + " --tokens " + tok +
                  " --score-second-half --json " + dir.file("c.json"));
  ASSERT_EQ(half.status, 0) << half.err;
  auto c = read_json(dir.file("c.json"));
  Expected h = expected(*model, ref.get(), cut(prompts[0], R, N), N / 2);
  EXPECT_EQ(c["positions"], double(R * (N - 1 - N / 2)));
  EXPECT_EQ(h.positions, R * (N - 1 - N / 2));
  EXPECT_NEAR(c["mean_kl"] / (h.kl / double(h.positions)), 1.0, 1e-5);
  EXPECT_EQ(c["top1_same"], double(h.top1_same));
  EXPECT_NEAR(c["perplexity"] / std::exp(h.nll_model / double(h.positions)), 1.0, 1e-6);
}

// --per-layer: the residual stream's relative RMS error after each layer, as computed here from the
// models' taps; the BF16 model against itself is 0 everywhere.
TEST(Eval, PerLayerError) {
  test::TempDir dir("tandem_eval_layers");
  PerturbedPair pair = perturbed_pair(dir);
  const int R = 2, N = 24;
  auto prompts = gguf::oracle::oracle_prompts({R * N}, 8);
  const std::string tok = write_tokens(dir.file("tokens.txt"), prompts[0]);
  auto r = run("eval --model " + pair.gguf + " --ref-model " + pair.hf + " --tokens " + tok +
               " --rows 2 --row-tokens 24 --per-layer --json " + dir.file("a.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream f(dir.file("a.json"));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());

  auto model = load(pair.gguf), ref = load(pair.hf);
  const int L = int(model->desc().layers.size()), H = model->desc().hidden;
  std::vector<int> all;
  for (int l = 0; l < L; ++l) all.push_back(l);
  model->set_taps(all);
  ref->set_taps(all);
  std::vector<double> err(static_cast<size_t>(L)), base(static_cast<size_t>(L));
  for (const auto& row : cut(prompts[0], R, N)) {
    logits_of(*model, row);
    logits_of(*ref, row);
    for (int l = 0; l < L; ++l) {
      const float* xm = model->tap(size_t(l)).f32();  // CPU: host memory
      const float* xr = ref->tap(size_t(l)).f32();
      for (size_t i = 0; i < size_t(N) * size_t(H); ++i)
        err[size_t(l)] += (double(xm[i]) - xr[i]) * (double(xm[i]) - xr[i]), base[size_t(l)] += double(xr[i]) * xr[i];
    }
  }
  size_t at = 0;
  for (int l = 0; l < L; ++l) {
    at = s.find("\"layer\": " + std::to_string(l) + ",", at);
    ASSERT_NE(at, std::string::npos) << l << "\n" << s;
    const double got = std::strtod(s.c_str() + s.find("\"rel_rms\": ", at) + 11, nullptr);
    const double want = std::sqrt(err[size_t(l)] / base[size_t(l)]);
    std::printf("layer %d: relative RMS error %.6g (here %.6g)\n", l, got, want);
    EXPECT_NEAR(got, want, 1e-9 + 1e-9 * want) << l;
  }
  EXPECT_GT(std::sqrt(err[size_t(L - 1)] / base[size_t(L - 1)]), 0.0);

  auto self = run("eval --model " + pair.hf + " --ref-model " + pair.hf + " --tokens " + tok +
                  " --rows 2 --row-tokens 24 --per-layer --json " + dir.file("b.json"));
  ASSERT_EQ(self.status, 0) << self.err;
  std::ifstream g(dir.file("b.json"));
  std::string t((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  for (size_t p = t.find("\"rel_rms\": "); p != std::string::npos; p = t.find("\"rel_rms\": ", p + 1))
    EXPECT_EQ(std::strtod(t.c_str() + p + 11, nullptr), 0.0) << t;
}

TEST(Eval, BadInputsAreOneLineErrors) {
  test::TempDir dir("tandem_eval_bad");
  auto chat = test::write_tiny_chat_model(dir.file("chat"),
                                          test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  std::ofstream(dir.file("short.txt")) << "too short";
  std::ofstream(dir.file("text.txt")) << kText;
  const std::string tok = write_tokens(dir.file("tokens.txt"), std::vector<int32_t>(100, 7));
  const std::string other = write_tokens(dir.file("other.txt"), std::vector<int32_t>(100, 8));
  const std::string nolatent = test::data_path("hf/nolatent");
  ASSERT_EQ(run("eval --model " + nolatent + " --tokens " + tok + " --rows 2 --row-tokens 50 --save-logits " +
                dir.file("ref.tlp")).status, 0);
  std::ofstream(dir.file("junk.tlp")) << "not a logprob file at all, but long enough to hold a header........";
  struct Case {
    std::string args, needle;
  } cases[] = {
      {"eval --config " + chat.profile + " --text " + dir.file("short.txt") + " --row-tokens 48",
       "is 9 tokens, shorter than one row of 48"},
      {"eval --config " + chat.profile + " --text " + dir.file("text.txt") + " --ref-model " + nolatent,
       "has a vocabulary of 256 tokens, the model '"},
      {"eval --model " + nolatent + " --tokens " + tok + " --row-tokens 50 --ref-model /nonexistent",
       "'/nonexistent' does not exist"},
      {"eval --model " + nolatent + " --tokens " + tok + " --ref-logits /nonexistent.tlp",
       "logprob file '/nonexistent.tlp' cannot be read"},
      {"eval --model " + nolatent + " --tokens " + tok + " --ref-logits " + dir.file("junk.tlp"), "not a tandem logprob file"},
      {"eval --model " + nolatent + " --tokens " + other + " --ref-logits " + dir.file("ref.tlp"),
       "the reference '" + dir.file("ref.tlp") + "' was made on 7"},
      {"eval --model " + nolatent + " --tokens " + tok + " --ref-logits " + dir.file("ref.tlp") + " --row-tokens 20",
       "holds rows of 50"},
      {"eval --config " + chat.profile + " --text " + dir.file("text.txt") + " --ref-logits " + dir.file("ref.tlp"),
       "has a vocabulary of 256 tokens, the model '"},
      {"eval --model " + nolatent + " --tokens " + tok + " --per-layer", "--per-layer needs a reference model"},
      {"eval --model " + nolatent + " --text " + dir.file("text.txt"), "--text needs a tokenizer"},
      {"eval --model " + nolatent, "give exactly one of --text FILE or --tokens FILE"},
      {"eval --model " + nolatent + " --tokens " + tok + " --ref-model " + nolatent + " --ref-logits " + dir.file("ref.tlp"),
       "give one reference"},
      {"inspect --model " + nolatent + " --tensor backbone.layers.0.mixer.in_prj",
       "no tensor 'backbone.layers.0.mixer.in_prj' and none named 'backbone.layers.0.mixer.in_prj.*'"},
      {"inspect --model " + nolatent + " --dequantize " + dir.file("x.npy"), "--dequantize needs --tensor NAME"},
  };
  for (const auto& c : cases) {
    auto r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
  }
  // The unknown tensor's error names the closest real ones.
  auto r = run("inspect --model " + nolatent + " --tensor backbone.layers.0.mixer.in_prj");
  EXPECT_NE(r.err.find("closest: backbone.layers.0.mixer.in_proj"), std::string::npos) << r.err;
  fs::remove(chat.profile);
}

namespace {

// The weight `name` of `path` as the format named `format` decodes it on the CPU, loaded here.
std::vector<float> format_dequantize(const std::string& path, const std::string& format, const std::string& name,
                                     std::vector<int64_t>& shape, const RawTensor** raw = nullptr) {
  LoadOptions o;
  o.path = path;
  auto ckpt = open_checkpoint(o, plugins());
  TensorGroup g;
  g.prefix = name;
  for (const auto& t : ckpt->tensors())
    if (t.name == name || t.name.rfind(name + ".", 0) == 0) g.members.push_back(&t);
  EXPECT_FALSE(g.members.empty()) << name;
  auto backend = plugins().backend("cpu");
  auto w = plugins().format(format, "cpu")->load(g, *backend);
  shape = w->shape();
  std::vector<float> out(size_t(w->rows() * w->cols()));
  w->dequantize(out.data());
  if (raw) *raw = g.member("");
  static std::vector<std::unique_ptr<Checkpoint>> keep;  // raw's bytes live in the checkpoint
  keep.push_back(std::move(ckpt));
  return out;
}

NpyArray dequantize_cli(const std::string& model, const std::string& tensor, const std::string& out) {
  auto r = run("inspect --model " + model + " --tensor " + tensor + " --dequantize " + out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(tensor + ": "), std::string::npos) << r.out;
  return read_npy(out);
}

}  // namespace

TEST(InspectDequantize, Gguf) {
  test::TempDir dir("tandem_inspect_gguf");
  PerturbedPair pair = perturbed_pair(dir);
  for (const std::string name : {"backbone.layers.0.mixer.in_proj.weight", "backbone.layers.1.mixer.experts.3.up_proj.weight",
                                 "backbone.embeddings.weight", "backbone.layers.0.mixer.D"}) {
    NpyArray a = dequantize_cli(pair.gguf, name, dir.file("t.npy"));
    std::vector<int64_t> shape;
    const RawTensor* raw = nullptr;
    std::vector<float> want = format_dequantize(pair.gguf, "gguf", name, shape, &raw);
    ASSERT_NE(raw, nullptr);
    EXPECT_EQ(a.shape, raw->shape) << name;
    EXPECT_EQ(a.shape, shape) << name;
    EXPECT_EQ(a.data, want) << name;
  }
}

TEST(InspectDequantize, SafetensorsBf16) {
  test::TempDir dir("tandem_inspect_st");
  for (const std::string model : {test::data_path("hf/nolatent"), test::data_path("hf/nolatent/model.safetensors")}) {
    const std::string name = "backbone.layers.0.mixer.in_proj.weight";
    NpyArray a = dequantize_cli(model, name, dir.file("t.npy"));
    std::vector<int64_t> shape;
    const RawTensor* raw = nullptr;
    std::vector<float> want = format_dequantize(model, "safetensors", name, shape, &raw);
    ASSERT_NE(raw, nullptr);
    ASSERT_EQ(raw->dtype, "BF16");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{200, 64}));
    EXPECT_EQ(a.shape, raw->shape);
    EXPECT_EQ(a.data, want);
    // BF16 is the top half of an f32: decoded here from the file's bytes.
    for (size_t i = 0; i < a.data.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, raw->data + 2 * i, 2);
      uint32_t bits = uint32_t(h) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      ASSERT_EQ(a.data[i], v) << i;
    }
  }
}

TEST(InspectDequantize, Exl3Linear) {
  test::TempDir dir("tandem_inspect_exl3");
  for (const char* file : {"exl3/s256x256_k2_mul1_hidentity.safetensors", "exl3/s256x256_k4_3inst_hidentity.safetensors",
                           "exl3/s256x256_k6_mcg_hidentity.safetensors"}) {
    const std::string path = test::data_path(file);
    NpyArray a = dequantize_cli(path, "linear", dir.file("t.npy"));
    std::vector<int64_t> shape;
    std::vector<float> want = format_dequantize(path, "exl3", "linear", shape);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{256, 256})) << file;
    EXPECT_EQ(a.data, want) << file;
    // And close to exllamav3's own reconstruction, stored (in, out) as f32.
    std::vector<int64_t> rshape;
    std::vector<float> recon = format_dequantize(path, "safetensors", "ref.weight_recon_fp32", rshape);
    ASSERT_EQ(rshape, (std::vector<int64_t>{256, 256}));
    double max_w = 0, max_d = 0;
    for (int64_t o = 0; o < 256; ++o)
      for (int64_t i = 0; i < 256; ++i) {
        const double ex = recon[size_t(i * 256 + o)];
        max_w = std::max(max_w, std::abs(ex));
        max_d = std::max(max_d, std::abs(double(a.data[size_t(o * 256 + i)]) - ex));
      }
    std::printf("%s: max |Δ| %.3g of max |W| %.3g against exllamav3\n", file, max_d, max_w);
    EXPECT_LT(max_d, 2e-6 * max_w) << file;
  }
}
