// `tandem convert --to exl3` end to end: a tiny nemotron_h (Mamba, attention, latent MoE with 3
// experts; cut from tests/fixtures/hf/latent) with a byte-level tokenizer is converted at 2, 3, 4 and
// 6 bits (identity Hessian) and at 3 bits with a calibration text; each pack loads through the exl3
// plugin and its next-token distributions are compared with the BF16 model's (mean KL, top-1).
// Also the CLI's error cases.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "byte_symbol.h"
#include "formats/safetensors/safetensors_file.h"
#include "formats/safetensors/safetensors_writer.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
namespace st = tandem::safetensors;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string tokenizer_json() {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  w.StartObject();
  w.Key("version"), w.String("1.0");
  w.Key("added_tokens"), w.StartArray(), w.EndArray();
  w.Key("normalizer"), w.Null();
  w.Key("pre_tokenizer"), w.StartObject();
  w.Key("type"), w.String("ByteLevel"), w.Key("add_prefix_space"), w.Bool(false);
  w.Key("trim_offsets"), w.Bool(true), w.Key("use_regex"), w.Bool(true);
  w.EndObject();
  w.Key("post_processor"), w.Null();
  w.Key("decoder"), w.StartObject(), w.Key("type"), w.String("ByteLevel"), w.EndObject();
  w.Key("model"), w.StartObject();
  w.Key("type"), w.String("BPE"), w.Key("byte_fallback"), w.Bool(false), w.Key("ignore_merges"), w.Bool(false);
  w.Key("vocab"), w.StartObject();
  for (int i = 0; i < 256; ++i) {
    std::string s = test::byte_symbol(i);
    w.Key(s.data(), rapidjson::SizeType(s.size())), w.Int(i);
  }
  w.EndObject();
  w.Key("merges"), w.StartArray(), w.EndArray();
  w.EndObject();
  w.EndObject();
  return std::string(b.GetString(), b.GetSize());
}

constexpr int kExperts = 3;

// Layers 0 (M), 3 (*) and 4 (E) of the latent fixture as layers 0, 1, 2; experts 0..2 of 8.
void write_tiny_model(const std::string& dir) {
  const std::string src = std::string(TANDEM_TEST_DATA) + "/hf/latent";
  fs::create_directories(dir);
  st::Mapping map(src + "/model.safetensors");
  auto tensors = st::parse_file(map.data(), map.size(), src + "/model.safetensors");
  const std::map<std::string, std::string> layers = {{"backbone.layers.0.", "backbone.layers.0."},
                                                     {"backbone.layers.3.", "backbone.layers.1."},
                                                     {"backbone.layers.4.", "backbone.layers.2."}};
  std::vector<st::WriteTensor> out;
  for (const RawTensor& t : tensors) {
    std::string name = t.name;
    if (name.rfind("backbone.layers.", 0) == 0) {
      std::string head = name.substr(0, name.find('.', 16) + 1);
      auto it = layers.find(head);
      if (it == layers.end()) continue;
      name = it->second + name.substr(head.size());
      if (auto e = name.find(".experts."); e != std::string::npos && std::stoi(name.substr(e + 9)) >= kExperts) continue;
    }
    st::WriteTensor w{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    if (name.find("mixer.gate.") != std::string::npos) {  // the router: its first kExperts rows
      size_t row = t.nbytes / size_t(t.shape[0]);
      w.shape[0] = kExperts;
      w.data.resize(row * kExperts);
    }
    out.push_back(std::move(w));
  }
  st::write_file(dir + "/model.safetensors", out);
  rapidjson::Document c;
  std::string text = slurp(src + "/config.json");
  c.Parse(text.c_str());
  c["hybrid_override_pattern"].SetString("M*E");
  c["num_hidden_layers"].SetInt(3);
  c["n_routed_experts"].SetInt(kExperts);
  c["num_experts_per_tok"].SetInt(2);
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  c.Accept(w);
  spit(dir + "/config.json", b.GetString());
  spit(dir + "/tokenizer.json", tokenizer_json());
  spit(dir + "/tokenizer_config.json", "{\"add_bos_token\": false, \"add_eos_token\": false}\n");
}

struct CliRun {
  int rc;
  std::string err;
};

CliRun tandem(const std::string& args, const std::string& log) {
  std::string cmd = std::string(TANDEM_BINARY_DIR) + "/bin/tandem " + args + " >" + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(log)};
}

const char* kText =
    "The quick brown fox jumps over the lazy dog. Mamba layers keep a state; attention layers keep a cache. "
    "Experts are chosen per token by a router, and the shared expert sees every token. Quantization trades "
    "bits for error: every bit removed roughly quadruples the mean squared error of a Gaussian weight. ";

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (const char* f : {"prompt_64.txt", "prompt_7.txt"}) {
    std::ifstream in(std::string(TANDEM_TEST_DATA) + "/hf/latent/" + f);
    std::vector<int32_t> ids;
    int v;
    while (in >> v) ids.push_back(v);
    out.push_back(ids);
  }
  std::string t = "Experts are chosen per token by a router.";
  out.push_back(std::vector<int32_t>(t.begin(), t.end()));  // byte ids = the tokenizer's ids
  return out;
}

std::vector<std::vector<float>> all_logits(const std::string& dir, PluginRegistry& reg, int* vocab) {
  LoadOptions o;
  o.path = dir;
  auto m = Model::load(o, reg);
  *vocab = m->desc().vocab;
  std::vector<std::vector<float>> out;
  for (const auto& p : prompts()) {
    auto seq = m->new_sequence(int64_t(p.size()));
    std::vector<float> l;
    m->forward(*seq, p, ForwardMode::Prefill, l, true);
    out.push_back(l);
  }
  return out;
}

struct Score {
  double kl = 0, top1 = 0;
};

Score compare(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& q, int vocab) {
  Score s;
  int64_t n = 0;
  for (size_t p = 0; p < ref.size(); ++p)
    for (size_t r = 0; r < ref[p].size() / size_t(vocab); ++r, ++n) {
      const float* a = &ref[p][r * size_t(vocab)];
      const float* b = &q[p][r * size_t(vocab)];
      double ma = a[0], mb = b[0];
      int ia = 0, ib = 0;
      for (int v = 1; v < vocab; ++v) {
        if (a[v] > ma) ma = a[v], ia = v;
        if (b[v] > mb) mb = b[v], ib = v;
      }
      double za = 0, zb = 0;
      for (int v = 0; v < vocab; ++v) za += std::exp(a[v] - ma), zb += std::exp(b[v] - mb);
      double kl = 0;
      for (int v = 0; v < vocab; ++v) {
        double la = a[v] - ma - std::log(za), lb = b[v] - mb - std::log(zb);
        kl += std::exp(la) * (la - lb);
      }
      s.kl += kl;
      s.top1 += ia == ib;
    }
  s.kl /= double(n), s.top1 /= double(n);
  return s;
}

TEST(Exl3Convert, KlFallsAsBitsRise) {
  test::TempDir tmp("exl3-convert");
  const std::string bf16 = tmp.file("bf16");
  write_tiny_model(bf16);
  spit(tmp.file("calib.txt"), std::string(kText) + kText + kText);

  PluginRegistry reg;
  reg.load_default();
  int vocab = 0;
  auto ref = all_logits(bf16, reg, &vocab);

  std::map<std::string, Score> scores;
  for (std::string variant : {"2", "3", "4", "6", "3c"}) {
    const std::string bits = variant.substr(0, 1), out = tmp.file("q" + variant);
    std::string args = "convert --to exl3 --bits " + bits + " --other-bits " + bits + " --head-bits " + bits + " " +
                       (variant == "3c" ? "--calibration " + tmp.file("calib.txt") + " " : "") + bf16 + " " + out;
    auto t0 = std::chrono::steady_clock::now();
    CliRun r = tandem(args, tmp.file("log.txt"));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));
    EXPECT_FALSE(fs::exists(out + ".partial"));
    std::string cfg = slurp(out + "/config.json");
    EXPECT_NE(cfg.find("\"quant_method\": \"exl3\""), std::string::npos) << cfg;
    int v = 0;
    Score s = compare(ref, all_logits(out, reg, &v), vocab);
    scores[variant] = s;
    std::printf("bits %-2s: mean KL %.5f, top-1 agreement %.3f, convert %.1f s\n", variant.c_str(), s.kl, s.top1, secs);
  }
  EXPECT_GT(scores["2"].kl, scores["3"].kl);
  EXPECT_GT(scores["3"].kl, scores["4"].kl);
  EXPECT_GT(scores["4"].kl, scores["6"].kl);
  EXPECT_LE(scores["2"].top1, scores["4"].top1);
  EXPECT_LE(scores["4"].top1, scores["6"].top1);
  EXPECT_LT(scores["6"].kl, 0.1);
  EXPECT_LT(scores["3c"].kl, scores["2"].kl);
}

TEST(Exl3Convert, CliErrors) {
  test::TempDir tmp("exl3-convert-cli");
  const std::string bf16 = tmp.file("bf16");
  write_tiny_model(bf16);
  const std::string log = tmp.file("log.txt");
  struct Case {
    std::string args, message;
  };
  fs::create_directories(tmp.file("full"));
  spit(tmp.file("full/x"), "x");
  const Case cases[] = {
      {"convert --to exl3 --bits 9 " + bf16 + " " + tmp.file("o"), "--bits must be 1..8, found 9"},
      {"convert --to exl3 --bits two " + bf16 + " " + tmp.file("o"), "--bits expects an integer"},
      {"convert --to exl3 " + bf16 + " " + tmp.file("o"), "--bits is required"},
      {"convert --to gguf --bits 4 " + bf16 + " " + tmp.file("o"), "--to 'gguf' is not supported"},
      {"convert --to exl3 --bits 4 --head-bits 12 " + bf16 + " " + tmp.file("o"), "--head-bits must be 1..8 or 16"},
      {"convert --to exl3 --bits 4 --codebook e8p " + bf16 + " " + tmp.file("o"), "unknown codebook 'e8p'"},
      {"convert --to exl3 --bits 4 " + tmp.file("missing") + " " + tmp.file("o"), "is not a directory"},
      {"convert --to exl3 --bits 4 " + tmp.path() + " " + tmp.file("o"), "cannot read config"},
      {"convert --to exl3 --bits 4 " + bf16 + " " + tmp.file("full"), "exists and is not empty (pass --force"},
      {"convert --to exl3 --bits 4 " + bf16, "expected INPUT_DIR and OUTPUT_DIR"},
      {"convert --to exl3 --bits 4 --calibration " + tmp.file("nope.txt") + " " + bf16 + " " + tmp.file("o"),
       "cannot read calibration text"},
  };
  for (const Case& c : cases) {
    CliRun r = tandem(c.args, log);
    EXPECT_EQ(r.rc, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') <= 2, true) << r.err;
  }
  EXPECT_FALSE(fs::exists(tmp.file("o")));
}

}  // namespace
}  // namespace tandem
