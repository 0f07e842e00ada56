// The EXL3 converter (`tandem convert --to exl3`): plans which tensors to quantize (routed experts at
// --bits, other linears at --other-bits below 4 bits, lm_head at --head-bits), optionally collects
// Hessians through the host's calibration, quantizes each linear into OUTPUT.partial/linears/ (so an
// interrupted run resumes), then writes the shards, config.json and side files through the
// safetensors Writer and renames OUTPUT.partial to OUTPUT.
#include "formats/exl3/converter.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <unistd.h>

#include "formats/exl3/quantize.h"
#include "tandem/converter.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "tandem/tensor.h"
#include "tandem/weights.h"
#include "tandem/writer.h"

namespace tandem::exl3 {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kShardBytes = 4000000000ull;
constexpr int64_t kSequenceTokens = 512;

struct Settings {
  std::string input, output;
  int bits = 0, head_bits = 6, other_bits = 4;
  Codebook codebook = Codebook::kMul1;
  std::string calibration;  // file, or empty
  int64_t rows = 2048;      // calibration tokens
  uint64_t seed = 0;
  bool force = false;
};

// One tensor of the output, in the input's order.
struct Item {
  const RawTensor* src = nullptr;
  std::string module;  // linears: the group prefix
  int K = 0;           // 0: copied as is
  const RawTensor* bias = nullptr;
};

enum class Role { Keep, Routed, Other, Head };

Role role_of(const RawTensor& t) {
  const std::string& n = t.name;
  if (t.shape.size() != 2 || n.size() < 7 || n.compare(n.size() - 7, 7, ".weight") != 0) return Role::Keep;
  std::string module = n.substr(0, n.size() - 7);
  if (module == "lm_head") return Role::Head;
  std::string last = module.substr(module.rfind('.') + 1);
  if (module.find(".mixer.experts.") != std::string::npos && (last == "up_proj" || last == "down_proj"))
    return Role::Routed;
  if (last.size() > 5 && last.compare(last.size() - 5, 5, "_proj") == 0) return Role::Other;
  return Role::Keep;  // embeddings, the router gate, norms, conv1d
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), "tandem convert: cannot read ", what, " '", path, "': ", std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file written with checked writes: a full disk names the path and the errno text.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    check(f_ != nullptr, "tandem convert: cannot create '", path, "': ", std::strerror(errno));
  }
  ~OutFile() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("tandem convert: writing '", path_, "' failed: ", std::strerror(errno));
  }
  void close() {
    int a = std::fflush(f_), b = ::fsync(fileno(f_)), c = std::fclose(f_);
    f_ = nullptr;
    if (a || b || c) fail("tandem convert: writing '", path_, "' failed: ", std::strerror(errno));
  }

 private:
  std::string path_;
  FILE* f_;
};

void write_text(const std::string& path, const std::string& text) {
  OutFile f(path);
  f.write(text.data(), text.size());
  f.close();
}

// Tensors written as one file of the writer's container, under a temporary name renamed at the end.
void write_tensors(const Writer& writer, const std::string& path, const std::vector<PackTensor>& tensors) {
  std::vector<TensorSpec> layout(tensors.begin(), tensors.end());
  const std::string tmp = path + ".tmp";
  {
    auto f = writer.create(tmp, layout);
    for (const auto& t : tensors) f->write(t.data.data(), t.data.size());
    f->close();
  }
  fs::rename(tmp, path);
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<float> to_f32(const RawTensor& t) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= size_t(d);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, t.data + 2 * i, 2);
    out[i] = t.dtype == "BF16" ? bf16_to_f32(v) : f16_to_f32(v);
  }
  return out;
}

std::vector<uint8_t> bias_f16(const RawTensor& b) {
  check(b.dtype == "BF16" || b.dtype == "F16" || b.dtype == "F32", "tandem convert: bias '", b.name,
        "' has dtype ", b.dtype, ", expected BF16, F16 or F32");
  size_t n = size_t(b.shape.empty() ? 1 : b.shape[0]);
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float v;
    if (b.dtype == "F32") std::memcpy(&v, b.data + 4 * i, 4);
    else {
      uint16_t h;
      std::memcpy(&h, b.data + 2 * i, 2);
      v = b.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
    }
    uint16_t f = f32_to_f16(v);
    std::memcpy(out.data() + 2 * i, &f, 2);
  }
  return out;
}

// The settings that decide the pack's bytes: a .partial folder made with others is not resumed.
std::string fingerprint(const Settings& s) {
  std::ostringstream o;
  o << "{\"input\": \"" << fs::absolute(s.input).string() << "\", \"bits\": " << s.bits << ", \"head_bits\": "
    << s.head_bits << ", \"other_bits\": " << s.other_bits << ", \"codebook\": \"" << codebook_name(s.codebook)
    << "\", \"calibration\": \"" << s.calibration << "\", \"rows\": " << s.rows << ", \"seed\": " << s.seed << "}\n";
  return o.str();
}

std::string fmt_time(double s) {
  char b[32];
  int t = int(s + 0.5);
  std::snprintf(b, sizeof b, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return b;
}

std::string option(const ConvertRequest& r, const std::string& name, const std::string& def = "") {
  auto it = r.options.find(name);
  return it == r.options.end() ? def : it->second;
}

long long option_int(const ConvertRequest& r, const std::string& name, long long def) {
  auto it = r.options.find(name);
  if (it == r.options.end()) return def;
  const std::string& v = it->second;
  size_t pos = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  check(pos == v.size() && !v.empty(), "tandem convert: --", name, " expects an integer, found '", v, "'");
  return x;
}

// The request's settings, checked in the order the usage lists them.
Settings settings(const ConvertRequest& r) {
  Settings s;
  s.input = r.input, s.output = r.output;
  check(r.options.count("bits"), "tandem convert: --bits is required (see 'tandem convert --help')");
  s.bits = int(option_int(r, "bits", 0));
  check(s.bits >= 1 && s.bits <= 8, "tandem convert: --bits must be 1..8, found ", option(r, "bits"));
  s.head_bits = int(option_int(r, "head-bits", 6));
  check((s.head_bits >= 1 && s.head_bits <= 8) || s.head_bits == 16,
        "tandem convert: --head-bits must be 1..8 or 16 (keep BF16), found ", option(r, "head-bits"));
  s.other_bits = int(option_int(r, "other-bits", 4));
  check(s.other_bits >= 1 && s.other_bits <= 8, "tandem convert: --other-bits must be 1..8, found ",
        option(r, "other-bits"));
  s.codebook = parse_codebook(option(r, "codebook", "mul1"));
  s.calibration = r.calibration;
  if (r.rows > 0) s.rows = r.rows;
  s.seed = r.seed;
  s.force = r.force;
  return s;
}

// Progress on stderr: one line, redrawn in place on a terminal, else a line every 10 %.
class Progress {
 public:
  Progress(size_t total, double total_mb) : total_(total), total_mb_(total_mb), tty_(::isatty(2)) {}
  void update(size_t done, double mb) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    double rate = s > 0 ? mb / s : 0, eta = rate > 0 ? (total_mb_ - mb) / rate : 0;
    int tenth = total_ ? int(10 * done / total_) : 10;
    if (!tty_ && tenth == last_ && done != total_) return;
    last_ = tenth;
    std::fprintf(stderr, "%sconvert: %zu/%zu linears, %.2f MB/s, ETA %s%s", tty_ ? "\r" : "", done, total_, rate,
                 fmt_time(eta).c_str(), tty_ && done != total_ ? "   " : "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_;
  double total_mb_;
  bool tty_;
  int last_ = -1;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace

std::vector<ConverterOption> Exl3Converter::options() const {
  return {
      {"bits", "B", "exl3: bits per weight of the routed experts, 1..8 (required)"},
      {"head-bits", "H|16", "exl3: lm_head bits, 1..8, or 16 to keep BF16 (default 6)"},
      {"other-bits", "O", "exl3: other linears' bits when B < 4 (default 4)"},
      {"codebook", "mul1|mcg|3inst", "exl3: the trellis codebook (default mul1)"},
  };
}
void Exl3Converter::validate(const ConvertRequest& request) const { (void)settings(request); }

void Exl3Converter::convert(const ConvertRequest& request, ConvertHost& host) const {
  const Settings s = settings(request);
  const auto t_start = std::chrono::steady_clock::now();

  // Input: a folder with a readable config.json and BF16 linears.
  check(fs::is_directory(s.input), "tandem convert: input '", s.input, "' is not a directory");
  const std::string config_text = read_file(s.input + "/config.json", "config");
  rapidjson::Document config;
  config.Parse(config_text.c_str(), config_text.size());
  check(!config.HasParseError() && config.IsObject(), "tandem convert: '", s.input,
        "/config.json' is not a JSON object");
  std::string calib_text;
  if (!s.calibration.empty()) {
    calib_text = read_file(s.calibration, "calibration text");
    check(!calib_text.empty(), "tandem convert: calibration file '", s.calibration, "' is empty");
  }

  // Output: refuse a non-empty folder unless --force; work in OUTPUT.partial.
  const std::string out = fs::path(s.output).lexically_normal().string();
  const std::string partial = out + ".partial";
  if (fs::exists(out)) {
    check(fs::is_directory(out), "tandem convert: output '", out, "' exists and is not a directory");
    check(fs::is_empty(out) || s.force, "tandem convert: output '", out,
          "' exists and is not empty (pass --force to replace it)");
  }
  const std::string fp = fingerprint(s);
  if (fs::exists(partial)) {
    std::string old = fs::exists(partial + "/convert.json") ? read_file(partial + "/convert.json", "resume record") : "";
    if (old != fp) {
      check(s.force, "tandem convert: '", partial, "' holds an unfinished conversion with other settings (delete it or pass --force)");
      fs::remove_all(partial);
    }
  }
  fs::create_directories(partial + "/linears");
  write_text(partial + "/convert.json", fp);

  const Checkpoint* ckpt = &host.input();
  // The pack is a safetensors folder; the per-linear files in .partial are too, read back by the format.
  const std::shared_ptr<Writer> writer = host.registry().writer("safetensors");
  const std::shared_ptr<WeightFormat> reader = host.registry().format("safetensors");

  // The plan.
  std::vector<Item> items;
  std::set<std::string> quantized;
  std::map<std::string, const RawTensor*> biases;
  for (const RawTensor& t : ckpt->tensors()) {
    Role r = role_of(t);
    int K = r == Role::Routed ? s.bits
            : r == Role::Other ? (s.bits < 4 ? s.other_bits : s.bits)
            : r == Role::Head ? (s.head_bits == 16 ? 0 : s.head_bits)
                              : 0;
    Item it;
    it.src = &t, it.K = K;
    if (K) {
      check(t.dtype == "BF16", "tandem convert: linear '", t.name, "' (", t.file, ") is ", t.dtype,
            "; the converter reads BF16 checkpoints");
      it.module = t.name.substr(0, t.name.size() - 7);
      quantized.insert(it.module);
    }
    items.push_back(it);
  }
  std::vector<Item> plan;
  for (Item& it : items) {
    const std::string& n = it.src->name;
    if (!it.K && n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0 && quantized.count(n.substr(0, n.size() - 5))) {
      biases[n.substr(0, n.size() - 5)] = it.src;
      continue;  // stored as F16 with its linear
    }
    plan.push_back(it);
  }
  for (Item& it : plan)
    if (it.K && biases.count(it.module)) it.bias = biases[it.module];
  check(!quantized.empty(), "tandem convert: '", s.input, "' has no linear weights to quantize");

  // Quantize what the .partial folder does not hold yet.
  auto linear_file = [&](const std::string& module) { return partial + "/linears/" + module + ".safetensors"; };
  size_t total = 0, done = 0;
  double total_mb = 0, done_mb = 0;
  std::vector<const Item*> pending;
  for (const Item& it : plan)
    if (it.K) {
      ++total;
      double mb = double(it.src->nbytes) * 1e-6;
      total_mb += mb;
      if (fs::exists(linear_file(it.module))) ++done, done_mb += mb;
      else pending.push_back(&it);
    }
  if (done) std::fprintf(stderr, "convert: resuming, %zu of %zu linears already in '%s'\n", done, total, partial.c_str());

  Calibration calib;
  if (!s.calibration.empty() && !pending.empty()) {
    std::set<std::string> want;
    for (const Item* it : pending) want.insert(it->module);
    auto t0 = std::chrono::steady_clock::now();
    calib = host.calibrate(calib_text, want, s.rows, kSequenceTokens);
    size_t seen = 0;
    for (const auto& [n, h] : calib.hessians) seen += h.rows > 0;
    std::fprintf(stderr, "convert: calibration ran %lld tokens in %d sequences (%.1f s); %zu of %zu linears saw rows\n",
                 (long long)calib.tokens, calib.sequences,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), seen, want.size());
  }

  Progress progress(total, total_mb - done_mb);
  double mb_now = 0;
  for (const Item* it : pending) {
    const RawTensor& t = *it->src;
    std::vector<float> w = to_f32(t);
    const float* h = nullptr;
    auto hit = calib.hessians.find(it->module);
    if (hit != calib.hessians.end() && hit->second.rows > 0 && hit->second.in == t.shape[1]) h = hit->second.h.data();
    QuantOptions o;
    o.bits = it->K, o.codebook = s.codebook, o.seed = name_seed(s.seed, it->module);
    QuantizedLinear q = quantize_linear(w.data(), t.shape[0], t.shape[1], h, o);
    write_tensors(*writer, linear_file(it->module), linear_tensors(q, it->module));
    ++done, mb_now += double(t.nbytes) * 1e-6;
    progress.update(done, mb_now);
  }

  // Shards: every tensor in the input's order, at most kShardBytes of data each.
  struct Out {
    TensorSpec layout;
    size_t bytes;
    const Item* item;
    int member;  // -1: a copied tensor; 0..: the linear's member; -2: its F16 bias
  };
  std::vector<std::vector<Out>> shards(1);
  uint64_t shard_bytes = 0;
  for (const Item& it : plan) {
    std::vector<Out> outs;
    if (!it.K) {
      outs.push_back({{it.src->name, it.src->dtype, it.src->shape}, it.src->nbytes, &it, -1});
    } else {
      auto layout = linear_layout(it.src->shape[0], it.src->shape[1], it.K, s.codebook, it.module);
      for (size_t m = 0; m < layout.size(); ++m)
        outs.push_back({layout[m], size_t(writer->tensor_bytes(layout[m])), &it, int(m)});
      if (it.bias) outs.push_back({{it.module + ".bias", "F16", it.bias->shape},
                       size_t(it.bias->shape.empty() ? 1 : it.bias->shape[0]) * 2, &it, -2});
    }
    uint64_t b = 0;
    for (const auto& o : outs) b += o.bytes;
    if (shard_bytes > 0 && shard_bytes + b > kShardBytes) shards.emplace_back(), shard_bytes = 0;
    for (auto& o : outs) shards.back().push_back(std::move(o));
    shard_bytes += b;
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  double written = 0;
  for (size_t si = 0; si < shards.size(); ++si) {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", si + 1, shards.size());
    std::vector<TensorSpec> layout;
    for (const auto& o : shards[si]) layout.push_back(o.layout), weight_map.emplace_back(o.layout.name, name);
    const std::string path = partial + "/" + name, tmp = path + ".tmp";
    auto f = writer->create(tmp, layout);
    std::string open_module;
    std::unique_ptr<Checkpoint> parts;
    for (const auto& o : shards[si]) {
      if (o.member == -1) {
        f->write(o.item->src->data, o.item->src->nbytes);
      } else if (o.member == -2) {
        auto b = bias_f16(*o.item->bias);
        f->write(b.data(), b.size());
      } else {
        if (open_module != o.item->module) {
          parts = reader->open(linear_file(o.item->module));
          open_module = o.item->module;
        }
        const RawTensor* p = parts->find(o.layout.name);
        check(p && p->nbytes == o.bytes && p->shape == o.layout.shape, "tandem convert: '",
              linear_file(o.item->module), "' lacks tensor '", o.layout.name, "' of shape and size expected (delete '",
              partial, "' and rerun)");
        f->write(p->data, p->nbytes);
      }
      written += double(o.bytes);
    }
    f->close();
    parts.reset();
    fs::rename(tmp, path);
  }
  if (shards.size() > 1) writer->write_index(partial + "/model.safetensors.index.json", weight_map);

  // config.json: the input's, plus quantization_config.
  {
    auto& al = config.GetAllocator();
    if (config.HasMember("quantization_config")) config.RemoveMember("quantization_config");
    rapidjson::Value q(rapidjson::kObjectType), c(rapidjson::kObjectType);
    q.AddMember("quant_method", "exl3", al);
    q.AddMember("version", "tandem-0.1", al);
    q.AddMember("bits", s.bits, al);
    q.AddMember("head_bits", s.head_bits, al);
    q.AddMember("other_bits", s.bits < 4 ? s.other_bits : s.bits, al);
    q.AddMember("codebook", rapidjson::Value(codebook_name(s.codebook), al), al);
    if (s.calibration.empty()) {
      c.AddMember("method", "identity", al);
    } else {
      c.AddMember("method", "hessian", al);
      c.AddMember("file", rapidjson::Value(fs::path(s.calibration).filename().string().c_str(), al), al);
      c.AddMember("tokens", rapidjson::Value(int64_t(calib.tokens)), al);
      c.AddMember("max_tokens", rapidjson::Value(int64_t(s.rows)), al);
      c.AddMember("sequence_tokens", rapidjson::Value(int64_t(kSequenceTokens)), al);
    }
    q.AddMember("calibration", c, al);
    config.AddMember("quantization_config", q, al);
    rapidjson::StringBuffer b;
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(b);
    w.SetIndent(' ', 2);
    config.Accept(w);
    write_text(partial + "/config.json", std::string(b.GetString(), b.GetSize()) + "\n");
  }
  // Side files (tokenizer, generation config, templates): every other top-level file of the input.
  for (const auto& e : fs::directory_iterator(s.input)) {
    if (!e.is_regular_file()) continue;
    std::string n = e.path().filename().string();
    if (n == "config.json" || n == "model.safetensors.index.json" || e.path().extension() == ".safetensors") continue;
    fs::copy_file(e.path(), fs::path(partial) / n, fs::copy_options::overwrite_existing);
  }

  fs::remove_all(partial + "/linears");
  fs::remove(partial + "/convert.json");
  if (fs::exists(out)) fs::remove_all(out);
  fs::rename(partial, out);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::fprintf(stderr, "convert: wrote %s (%zu linears, %zu shard%s, %.1f MB) in %.1f s\n", out.c_str(), total,
               shards.size(), shards.size() == 1 ? "" : "s", written * 1e-6, secs);
}

}  // namespace tandem::exl3
