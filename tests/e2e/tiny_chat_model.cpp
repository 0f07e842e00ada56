// The tiny chat model: a Mamba–attention–Mamba–MLP nemotron_h with random BF16 weights (scales as
// tests/fixtures/hf/README.md keeps every branch's RMS near 1) and a byte-level BPE tokenizer.
#include "tiny_chat_model.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "byte_symbol.h"
#include "formats/safetensors/safetensors_writer.h"

namespace tandem::test {

namespace {

namespace fs = std::filesystem;
namespace st = tandem::safetensors;

constexpr int kHidden = 64, kHeads = 8, kHeadDim = 8, kGroups = 2, kState = 16, kConv = 4;
constexpr int kDin = kHeads * kHeadDim, kConvDim = kDin + 2 * kGroups * kState;
constexpr int kQHeads = 4, kKvHeads = 2, kAttnDim = 16, kMlp = 96;
constexpr const char* kPattern = "M*M-";

// Ids 0–31: control and chat-format tokens (Nemotron's EOS ids are 2 and 11); 32–287: the bytes.
const char* const kSpecials[32] = {
    "<unk>", "<s>", "</s>", "<SPECIAL_3>", "<SPECIAL_4>", "<SPECIAL_5>", "<SPECIAL_6>", "<SPECIAL_7>",
    "<SPECIAL_8>", "<SPECIAL_9>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<tool_response>", "</tool_response>", "<SPECIAL_18>", "<SPECIAL_19>", "<SPECIAL_20>",
    "<SPECIAL_21>", "<SPECIAL_22>", "<SPECIAL_23>", "<SPECIAL_24>", "<SPECIAL_25>", "<SPECIAL_26>",
    "<SPECIAL_27>", "<SPECIAL_28>", "<SPECIAL_29>", "<SPECIAL_30>", "<SPECIAL_31>"};

// Control tokens are special; the tags the chat format writes as text are not (as in Qwen/Nemotron).
bool is_control(int id) { return id < 12 || id > 17; }

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;
void key(Writer& w, const char* k) { w.Key(k); }
void str(Writer& w, const std::string& s) { w.String(s.data(), rapidjson::SizeType(s.size())); }

std::string tokenizer_json() {
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  key(w, "version"), w.String("1.0");
  key(w, "added_tokens");
  w.StartArray();
  for (int id = 0; id < 32; ++id) {
    w.StartObject();
    key(w, "id"), w.Int(id);
    key(w, "content"), w.String(kSpecials[id]);
    key(w, "single_word"), w.Bool(false);
    key(w, "lstrip"), w.Bool(false);
    key(w, "rstrip"), w.Bool(false);
    key(w, "normalized"), w.Bool(false);
    key(w, "special"), w.Bool(is_control(id));
    w.EndObject();
  }
  w.EndArray();
  key(w, "normalizer"), w.Null();
  key(w, "pre_tokenizer");
  w.StartObject();
  key(w, "type"), w.String("ByteLevel");
  key(w, "add_prefix_space"), w.Bool(false);
  key(w, "trim_offsets"), w.Bool(true);
  key(w, "use_regex"), w.Bool(true);
  w.EndObject();
  key(w, "post_processor"), w.Null();
  key(w, "decoder");
  w.StartObject();
  key(w, "type"), w.String("ByteLevel");
  w.EndObject();
  key(w, "model");
  w.StartObject();
  key(w, "type"), w.String("BPE");
  key(w, "byte_fallback"), w.Bool(false);
  key(w, "ignore_merges"), w.Bool(false);
  key(w, "vocab");
  w.StartObject();
  for (int id = 0; id < 32; ++id) key(w, kSpecials[id]), w.Int(id);
  for (int byte = 0; byte < 256; ++byte) str(w, byte_symbol(byte)), w.Int(kTinyFirstByte + byte);
  w.EndObject();
  key(w, "merges");
  w.StartArray();
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return std::string(b.GetString(), b.GetSize());
}

std::string read_template(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw std::runtime_error("tiny chat model: chat template '" + path + "' is a folder, expected a .jinja file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("tiny chat model: cannot read chat template '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f.good() && !f.eof()) throw std::runtime_error("tiny chat model: cannot read chat template '" + path + "'");
  if (ss.str().empty()) throw std::runtime_error("tiny chat model: chat template '" + path + "' is empty");
  return ss.str();
}

std::string tokenizer_config_json(const std::string& chat_template) {
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  key(w, "bos_token"), w.String("<s>");
  key(w, "eos_token"), w.String("<|im_end|>");
  key(w, "add_bos_token"), w.Bool(false);
  key(w, "add_eos_token"), w.Bool(false);
  key(w, "chat_template"), str(w, chat_template);
  w.EndObject();
  return std::string(b.GetString(), b.GetSize());
}

std::string config_json() {
  std::ostringstream c;
  c << R"({
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "vocab_size": )" << kTinyChatVocab << R"(, "hidden_size": )" << kHidden << R"(, "num_hidden_layers": 4,
  "hybrid_override_pattern": ")" << kPattern << R"(", "layer_norm_epsilon": 1e-05,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": [2, 11], "pad_token_id": 0,
  "mamba_num_heads": )" << kHeads << R"(, "mamba_head_dim": )" << kHeadDim << R"(, "n_groups": )" << kGroups
    << R"(, "ssm_state_size": )" << kState << R"(, "conv_kernel": )" << kConv << R"(, "chunk_size": 16,
  "expand": 2, "use_conv_bias": true, "mamba_proj_bias": false, "mamba_hidden_act": "silu",
  "time_step_min": 0.001, "time_step_max": 0.1, "time_step_floor": 0.0001,
  "time_step_limit": [0.0, {"__float__": "Infinity"}],
  "num_attention_heads": )" << kQHeads << R"(, "num_key_value_heads": )" << kKvHeads << R"(, "head_dim": )"
    << kAttnDim << R"(, "attention_bias": false,
  "intermediate_size": )" << kMlp << R"(, "mlp_hidden_act": "relu2", "mlp_bias": false,
  "max_position_embeddings": 4096, "dtype": "bfloat16"
}
)";
  return c.str();
}

class Weights {
 public:
  explicit Weights(uint64_t seed) : rng_(seed) {}
  std::vector<float> normal(size_t n, double mean, double sd) {
    std::normal_distribution<double> d(mean, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(rng_));
    return v;
  }
  std::vector<float> uniform(size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(rng_));
    return v;
  }
  void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors.push_back(st::make_bf16(name, std::move(shape), v));
  }
  void linear(const std::string& name, int64_t out, int64_t in, double gain = 1.0) {
    add(name, {out, in}, normal(size_t(out * in), 0.0, gain / std::sqrt(double(in))));
  }
  void norm(const std::string& name, int64_t n) { add(name, {n}, normal(size_t(n), 1.0, 0.1)); }
  std::vector<st::WriteTensor> tensors;

 private:
  std::mt19937_64 rng_;
};

std::vector<st::WriteTensor> weights(uint64_t seed) {
  Weights w(seed);
  w.add("backbone.embeddings.weight", {kTinyChatVocab, kHidden}, w.normal(size_t(kTinyChatVocab) * kHidden, 0.0, 1.0));
  for (int i = 0; kPattern[i]; ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".", m = p + "mixer.";
    w.norm(p + "norm.weight", kHidden);
    switch (kPattern[i]) {
      case 'M': {
        std::vector<float> in = w.normal(size_t(kDin + kConvDim) * kHidden, 0.0, 1.0 / std::sqrt(double(kHidden)));
        std::vector<float> dt = w.normal(size_t(kHeads) * kHidden, 0.0, 0.3 / std::sqrt(double(kHidden)));
        in.insert(in.end(), dt.begin(), dt.end());
        w.add(m + "in_proj.weight", {kDin + kConvDim + kHeads, kHidden}, in);
        w.add(m + "conv1d.weight", {kConvDim, 1, kConv}, w.normal(size_t(kConvDim) * kConv, 0.0, 0.5));
        w.add(m + "conv1d.bias", {kConvDim}, w.normal(kConvDim, 0.0, 0.1));
        std::vector<float> a = w.uniform(kHeads, 1.0, 16.0), dtb = w.uniform(kHeads, std::log(0.02), std::log(0.3));
        for (auto& x : a) x = std::log(x);
        for (auto& x : dtb) x = float(std::log(std::expm1(std::exp(double(x)))));  // softplus⁻¹(Δ0)
        w.add(m + "A_log", {kHeads}, a);
        w.add(m + "D", {kHeads}, w.normal(kHeads, 1.0, 0.5));
        w.add(m + "dt_bias", {kHeads}, dtb);
        w.norm(m + "norm.weight", kDin);
        w.linear(m + "out_proj.weight", kHidden, kDin, 0.7);
        break;
      }
      case '*':
        w.linear(m + "q_proj.weight", kQHeads * kAttnDim, kHidden, 1.5);
        w.linear(m + "k_proj.weight", kKvHeads * kAttnDim, kHidden, 1.5);
        w.linear(m + "v_proj.weight", kKvHeads * kAttnDim, kHidden);
        w.linear(m + "o_proj.weight", kHidden, kQHeads * kAttnDim);
        break;
      case '-':
        w.linear(m + "up_proj.weight", kMlp, kHidden);
        w.linear(m + "down_proj.weight", kHidden, kMlp, 0.5);
        break;
    }
  }
  w.norm("backbone.norm_f.weight", kHidden);
  w.linear("lm_head.weight", kTinyChatVocab, kHidden, 3.0);
  return std::move(w.tensors);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("tiny chat model: cannot write '" + p.string() + "'");
}

}  // namespace

TinyChatModel write_tiny_chat_model(const std::string& dir, const std::string& chat_template_path,
                                    const std::string& api_key, uint64_t seed) {
  if (dir.empty()) throw std::runtime_error("tiny chat model: the output folder is empty");
  // Inputs first: nothing is written unless all of them are good.
  const std::string chat_template = read_template(chat_template_path);
  for (char c : api_key)
    if (!std::isgraph(static_cast<unsigned char>(c)) || c == '#' || c == '"' || c == '\'')
      throw std::runtime_error("tiny chat model: api key '" + api_key +
                               "' must be printable ASCII without spaces, quotes or '#'");
  TinyChatModel m{fs::absolute(fs::path(dir)).lexically_normal().string(), ""};
  while (m.dir.size() > 1 && m.dir.back() == '/') m.dir.pop_back();
  m.profile = m.dir + ".yaml";
  // Missing parent folders are made (build/e2e/ in the README), and removed again on a failure.
  std::error_code ec;
  fs::path made;  // the outermost folder this call creates, if any
  for (fs::path p = fs::path(m.dir).parent_path(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) made = p;

  // Written under temporary names beside the targets (same file system, so the renames are atomic).
  const std::string suffix = ".partial-" + std::to_string(::getpid());
  const fs::path tmp_dir = m.dir + suffix, tmp_profile = m.profile + suffix;
  try {
    if (!made.empty()) fs::create_directories(fs::path(m.dir).parent_path());
    fs::remove_all(tmp_dir);
    fs::create_directory(tmp_dir);
    st::write_file((tmp_dir / "model.safetensors").string(), weights(seed));
    write_text(tmp_dir / "config.json", config_json());
    write_text(tmp_dir / "tokenizer.json", tokenizer_json());
    write_text(tmp_dir / "tokenizer_config.json", tokenizer_config_json(chat_template));
    std::string server = "server:\n  served_model_name: tiny-chat\n  aliases: [tiny]\n";
    if (!api_key.empty()) server += "  api_key: " + api_key + "\n";
    write_text(tmp_profile, "# Written by the tests (tests/e2e/tiny_chat_model.cpp): the tiny chat model.\n"
                            "model: " + m.dir + "\nformat: safetensors\ndevice: cpu\nthreads: 1\ncontext: 2048\n"
                            "max_tokens: 64\nsampling: {temperature: 0.0, seed: 0}\n" + server +
                            "  slots: 2\n  default_max_tokens: 64\n");
    fs::remove_all(m.dir);
    fs::rename(tmp_dir, m.dir);
    fs::rename(tmp_profile, m.profile);
  } catch (const std::exception& e) {
    fs::remove_all(tmp_dir, ec);
    fs::remove(tmp_profile, ec);
    if (!made.empty()) fs::remove_all(made, ec);
    throw std::runtime_error(std::string("tiny chat model: writing '") + m.dir + "' failed: " + e.what());
  }
  return m;
}

}  // namespace tandem::test
