// Opening MLX folders: the quantization block of config.json, the safetensors files, and the
// transcoding of every quantized module into GGML blocks (docs/formats-mlx.md).
#include "mlx_checkpoint.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "mlx_files.h"
#include "mlx_repack.h"
#include "tandem/error.h"

namespace tandem::mlx {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndex = "model.safetensors.index.json";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
bool is_float(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

// Stacked experts become one tensor each: a hostile [2^39, 0] stack holds no bytes but would list 2^39
// views. Far above any released MoE (512 routed experts at most).
constexpr int64_t kMaxExperts = 65536;

void check_experts(const RawTensor& t) {
  check(t.shape[0] <= kMaxExperts && (t.nbytes > 0 || t.shape[0] == 0), "mlx: file '", t.file, "': tensor '",
        printable(t.name), "': stacked experts ", t.dtype, " ", shape_str(t.shape), " (expected 1 to ", kMaxExperts,
        " non-empty experts)");
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(bool(in), "mlx: cannot read '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// One module's quantization, as MLX's config records it.
struct QuantSpec {
  std::string mode = "affine";  // MLX configs before modes carry none: affine
  int64_t bits = 0, group_size = 0;
};

// The quantization block: global {group_size, bits, mode} and per-module overrides (an object, or
// false for a module left unquantized). MLX writes it as `quantization`, and newer versions repeat it
// as `quantization_config`; an HF `quantization_config` (it has `quant_method`) is not MLX's.
class QuantConfig {
 public:
  QuantConfig(const std::string& text, const std::string& file) : file_(file) {
    check(json_depth(text) <= kMaxJsonDepth, "mlx: file '", file, "' nests deeper than ", kMaxJsonDepth, " levels");
    rapidjson::Document doc;
    doc.Parse(text.data(), text.size());
    check(!doc.HasParseError() && doc.IsObject(), "mlx: file '", file, "' is not a JSON object");
    const rapidjson::Value* q = nullptr;
    if (auto it = doc.FindMember("quantization"); it != doc.MemberEnd()) q = &it->value;
    else if (auto jt = doc.FindMember("quantization_config");
             jt != doc.MemberEnd() && jt->value.IsObject() && !jt->value.HasMember("quant_method") &&
             (jt->value.HasMember("bits") || jt->value.HasMember("group_size")))
      q = &jt->value;
    if (!q) return;
    check(q->IsObject(), "mlx: file '", file, "': 'quantization' is not an object");
    present_ = true;
    read_spec(*q, "quantization", global_);
    for (auto it = q->MemberBegin(); it != q->MemberEnd(); ++it) {
      const std::string key = it->name.GetString();
      if (it->value.IsObject()) {
        QuantSpec s = global_;
        read_spec(it->value, "quantization." + printable(key), s);
        modules_[key] = s;
      } else if (it->value.IsBool()) {
        if (!it->value.GetBool()) modules_[key] = std::nullopt;
      }
    }
  }

  bool present() const { return present_; }
  const std::string& file() const { return file_; }

  // The spec of a module that has scales. Errors: no block at all; the module marked unquantized.
  QuantSpec spec(const std::string& module, const std::string& tensor) const {
    check(present_, "mlx: file '", file_, "': tensor '", printable(tensor),
          "' has MLX scales, but the config carries no 'quantization' block");
    auto it = modules_.find(module);
    if (it == modules_.end()) return global_;
    check(it->second.has_value(), "mlx: file '", file_, "': tensor '", printable(tensor),
          "' has MLX scales, but quantization.", printable(module), " is false (not quantized)");
    return *it->second;
  }

 private:
  void read_spec(const rapidjson::Value& v, const std::string& where, QuantSpec& s) const {
    auto integer = [&](const char* key, int64_t& out) {
      auto it = v.FindMember(key);
      if (it == v.MemberEnd()) return;
      check(it->value.IsInt64() && it->value.GetInt64() > 0, "mlx: file '", file_, "': ", where, ".", key,
            " is not a positive integer");
      out = it->value.GetInt64();
    };
    integer("bits", s.bits);
    integer("group_size", s.group_size);
    if (auto it = v.FindMember("mode"); it != v.MemberEnd()) {
      check(it->value.IsString(), "mlx: file '", file_, "': ", where, ".mode is not a string");
      s.mode = it->value.GetString();
    }
  }

  std::string file_;
  bool present_ = false;
  QuantSpec global_;
  std::map<std::string, std::optional<QuantSpec>> modules_;
};

// mlx-lm stacks a MoE layer's routed experts as `…mixer.switch_mlp.fc1` (up) and `.fc2` (down).
// Returns true with `base` = "…mixer.experts." and `proj` for such a module.
bool expert_stack(const std::string& module, std::string& base, std::string& proj) {
  for (const auto& [mlx, hf] : {std::pair{".switch_mlp.fc1", "up_proj"}, std::pair{".switch_mlp.fc2", "down_proj"}})
    if (ends_with(module, mlx)) {
      base = module.substr(0, module.size() - std::strlen(mlx)) + ".experts.";
      proj = hf;
      return true;
    }
  return false;
}

// The safetensors files of a folder: those its index names, else every *.safetensors in it.
std::vector<fs::path> folder_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (is_file(dir / kIndex)) {
    rapidjson::Document doc;
    const std::string text = read_text(dir / kIndex);
    check(json_depth(text) <= kMaxJsonDepth, "mlx: index '", (dir / kIndex).string(), "' nests deeper than ",
          kMaxJsonDepth, " levels");
    doc.Parse(text.data(), text.size());
    check(!doc.HasParseError() && doc.IsObject() && doc.HasMember("weight_map") && doc["weight_map"].IsObject(),
          "mlx: index '", (dir / kIndex).string(), "' has no weight_map object");
    std::set<std::string> names;
    for (const auto& m : doc["weight_map"].GetObject()) {
      check(m.value.IsString(), "mlx: index '", (dir / kIndex).string(), "': weight_map entry '",
            printable(m.name.GetString()), "' is not a file name");
      names.insert(m.value.GetString());
    }
    for (const auto& n : names) {
      check(is_file(dir / n), "mlx: index '", (dir / kIndex).string(), "' names '", printable(n),
            "', which is not in the folder");
      files.push_back(dir / n);
    }
    return files;
  }
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (ends_with(it->path().filename().string(), ".safetensors") && is_file(it->path())) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  return files;
}

class MlxCheckpoint final : public Checkpoint {
 public:
  explicit MlxCheckpoint(const std::string& path) : path_(path), dir_(path) {
    check(is_file(dir_ / "config.json"), "mlx: folder '", path, "' has no config.json");
    config_ = read_text(dir_ / "config.json");
    const QuantConfig quant(config_, (dir_ / "config.json").string());
    const auto files = folder_files(dir_);
    check(!files.empty(), "mlx: folder '", path, "' holds no *.safetensors file");
    for (const auto& f : files) {
      files_.push_back(std::make_unique<MappedFile>(f.string()));
      for (const RawTensor& t : files_.back()->tensors()) {
        auto [it, fresh] = raw_.emplace(t.name, &t);
        check(fresh, "mlx: tensor '", printable(t.name), "' is in both '", it->second->file, "' and '", t.file, "'");
      }
    }
    std::vector<std::string> names;
    for (const auto& [n, t] : raw_) names.push_back(n);
    std::sort(names.begin(), names.end());  // a stable order of tensors and of errors
    for (const auto& n : names)
      if (ends_with(n, ".scales")) add_module(n.substr(0, n.size() - 7), quant);
    for (const auto& n : names) {
      if (used_.count(n)) continue;
      const RawTensor& t = *raw_.at(n);
      if (is_float(t.dtype)) {
        add_float(t);
        continue;
      }
      const std::string at = "mlx: file '" + t.file + "': tensor '" + printable(n) + "'";
      if (t.dtype == "U32" && ends_with(n, ".weight"))
        fail(at, " is U32 (an MLX-quantized weight), but '", printable(n.substr(0, n.size() - 7)),
             ".scales' is missing");
      fail(at, " has dtype ", t.dtype, ", which is neither a float tensor nor part of a quantized module");
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto [it, fresh] = index_.emplace(tensors_[i].name, i);
      check(fresh, "mlx: folder '", path, "': two tensors map to '", printable(tensors_[i].name), "'");
    }
  }

  std::string path() const override { return path_; }
  std::string config_json() const override { return config_; }
  const std::vector<RawTensor>& tensors() const override { return tensors_; }
  const RawTensor* find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::optional<std::string> side_file(const std::string& name) const override {
    if (!is_file(dir_ / name)) return std::nullopt;
    return read_text(dir_ / name);
  }
  std::string dump() const override {
    std::string s = "MLX folder '" + path_ + "': " + std::to_string(modules_) +
                    " quantized modules transcoded to GGML blocks (" +
                    std::to_string(transcoded_bytes_) + " bytes of host memory)\n";
    return s + Checkpoint::dump();
  }

 private:
  // A float tensor, pointing into its file; stacked experts split into one view each.
  void add_float(const RawTensor& t) {
    std::string base, proj;
    const size_t dot = t.name.rfind('.');
    const std::string module = dot == std::string::npos ? t.name : t.name.substr(0, dot);
    if (dot != std::string::npos && expert_stack(module, base, proj) && t.shape.size() >= 2) {
      check_experts(t);
      const int64_t e = t.shape[0];
      const size_t per = e > 0 ? t.nbytes / size_t(e) : 0;
      for (int64_t j = 0; j < e; ++j)
        tensors_.push_back(RawTensor{base + std::to_string(j) + "." + proj + t.name.substr(dot), t.dtype,
                                     {t.shape.begin() + 1, t.shape.end()}, t.data + size_t(j) * per, per, t.file});
      return;
    }
    tensors_.push_back(t);
  }

  const RawTensor* take(const std::string& name) {
    auto it = raw_.find(name);
    if (it == raw_.end()) return nullptr;
    used_.insert(name);
    return it->second;
  }

  void add_module(const std::string& module, const QuantConfig& quant) {
    const RawTensor* s = take(module + ".scales");
    const RawTensor* w = take(module + ".weight");
    const RawTensor* b = take(module + ".biases");
    const RawTensor* g = take(module + ".global_scale");
    check(w != nullptr, "mlx: file '", s->file, "': tensor '", printable(s->name), "' has no '", printable(module),
          ".weight' beside it");
    const std::string at = "mlx: file '" + w->file + "': tensor '" + printable(w->name) + "'";
    const QuantSpec spec = quant.spec(module, w->name);
    std::string base, proj;
    const bool stacked = expert_stack(module, base, proj);
    check(w->dtype == "U32" && w->shape.size() == (stacked ? 3u : 2u), at, ": expected U32 ",
          stacked ? "[experts, out, words]" : "[out, words]", ", found ", w->dtype, " ", shape_str(w->shape));
    if (stacked) check_experts(*w);
    const int64_t e = stacked ? w->shape[0] : 1, n = w->shape[w->shape.size() - 2], words = w->shape.back();
    check(e > 0 && n > 0 && words > 0, at, ": empty shape ", shape_str(w->shape));
    std::vector<int64_t> lead(w->shape.begin(), w->shape.end() - 1);  // [E,] N

    auto companion = [&](const RawTensor* c, const char* suffix, int64_t cols, const char* dtypes, bool want_half) {
      check(c != nullptr, at, ": its '", printable(module), ".", suffix, "' (", spec.mode, ") is missing");
      std::vector<int64_t> shape = lead;
      shape.push_back(cols);
      Half h;
      const bool dtype_ok = want_half ? half_type(c->dtype, h) : c->dtype == "U8";
      check(dtype_ok && c->shape == shape, "mlx: file '", c->file, "': tensor '", printable(c->name), "': expected ",
            dtypes, " ", shape_str(shape), " for ", spec.mode, " weights ", shape_str(w->shape), ", found ", c->dtype,
            " ", shape_str(c->shape));
    };
    auto none = [&](const RawTensor* c) {
      check(c == nullptr, "mlx: file '", c ? c->file : "", "': tensor '", c ? printable(c->name) : "",
            "' has no meaning in ", spec.mode, " mode");
    };

    std::string dtype;
    int64_t k = 0, row_bytes = 0;
    std::vector<float> multipliers;
    Half half = Half::F16;
    const std::string mode_at = "mlx: file '" + quant.file() + "': tensor '" + printable(w->name) + "'";
    if (spec.mode == "iq2_xxs") {
      k = words * 16;
      check(k % kIq2Block == 0, at, ": rows of ", k, " elements (", words,
            " words) are not whole IQ2_XXS blocks of 256");
      companion(s, "scales", k / kIq2Block, "F16", true);
      half_type(s->dtype, half);
      none(b), none(g);
      dtype = "IQ2_XXS", row_bytes = k / kIq2Block * kIq2Bytes;
    } else if (spec.mode == "nvfp4") {
      check(spec.bits == 4 && spec.group_size == 16, mode_at,
            ": nvfp4 needs bits 4 and group_size 16, the config says ", spec.bits, " and ", spec.group_size);
      k = words * 8;
      check(k % kNvfp4Block == 0, at, ": rows of ", k, " elements are not whole NVFP4 blocks of 64");
      companion(s, "scales", k / 16, "U8", false);
      none(b);
      if (g) {
        int64_t count = 1;
        for (int64_t d : g->shape) count *= d;
        check((is_float(g->dtype) || g->dtype == "F64") && (count == 1 || count == e), "mlx: file '", g->file,
              "': tensor '", printable(g->name), "': expected one float", e > 1 ? " or one per expert" : "",
              ", found ", g->dtype, " ", shape_str(g->shape));
        for (int64_t j = 0; j < e; ++j) {
          const uint8_t* p = g->data + (count == 1 ? 0 : size_t(j) * element_bytes(g->dtype));
          double v;
          if (g->dtype == "F64") {
            std::memcpy(&v, p, 8);
          } else if (g->dtype == "F32") {
            float f;
            std::memcpy(&f, p, 4);
            v = f;
          } else {
            const uint16_t h = uint16_t(p[0] | p[1] << 8);
            v = g->dtype == "F16" ? f16_to_f32(h) : bf16_to_f32(h);
          }
          multipliers.push_back(nvfp4_multiplier(v));
        }
      }
      dtype = "NVFP4", row_bytes = k / kNvfp4Block * kNvfp4Bytes;
    } else if (spec.mode == "affine") {
      check(spec.bits == 8, mode_at, ": affine with bits ", spec.bits,
            " is not a Q8_0 transcode (tandem reads 8-bit affine only)");
      k = words * 4;
      check(spec.group_size > 0 && spec.group_size % kQ8Block == 0 && k % spec.group_size == 0, mode_at,
            ": affine group_size ", spec.group_size, " over rows of ", k,
            " elements is not whole Q8_0 blocks of 32 (tandem reads groups of 32, 64, 96, …)");
      companion(s, "scales", k / spec.group_size, "F16 or BF16", true);
      companion(b, "biases", k / spec.group_size, "F16 or BF16", true);
      check(b->dtype == s->dtype, "mlx: file '", b->file, "': tensor '", printable(b->name), "' is ", b->dtype,
            ", its scales ", s->dtype);
      half_type(s->dtype, half);
      none(g);
      dtype = "Q8_0", row_bytes = k / kQ8Block * kQ8Bytes;
    } else {
      fail(mode_at, ": unknown quantization mode '", printable(spec.mode),
           "' (tandem reads iq2_xxs, nvfp4 and 8-bit affine)");
    }

    const int64_t rows = e * n;
    buffers_.emplace_back(new uint8_t[size_t(rows * row_bytes)]);
    uint8_t* out = buffers_.back().get();
    transcoded_bytes_ += size_t(rows * row_bytes);
    ++modules_;
    if (dtype == "IQ2_XXS") iq2_xxs_to_gguf(w->data, s->data, half, rows, k, out, at);
    else if (dtype == "NVFP4") nvfp4_to_gguf(w->data, s->data, rows, k, out, at);
    else affine8_to_q8_0(w->data, s->data, b->data, half, rows, k, spec.group_size, out, at);

    float* scale_out = nullptr;
    if (!multipliers.empty()) {
      buffers_.emplace_back(new uint8_t[multipliers.size() * 4]);
      scale_out = reinterpret_cast<float*>(buffers_.back().get());
      std::memcpy(scale_out, multipliers.data(), multipliers.size() * 4);
    }
    const size_t per = size_t(n * row_bytes);
    for (int64_t j = 0; j < e; ++j) {
      const std::string name = stacked ? base + std::to_string(j) + "." + proj : module;
      tensors_.push_back(RawTensor{name + ".weight", dtype, {n, k}, out + size_t(j) * per, per, w->file});
      if (scale_out)
        tensors_.push_back(RawTensor{name + ".scale", "F32", stacked ? std::vector<int64_t>{} : std::vector<int64_t>{1},
                                     reinterpret_cast<const uint8_t*>(scale_out + j), 4, g->file});
    }
  }

  std::string path_;
  fs::path dir_;
  std::string config_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::unordered_map<std::string, const RawTensor*> raw_;
  std::set<std::string> used_;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
  std::vector<RawTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  size_t transcoded_bytes_ = 0;
  int modules_ = 0;
};

// Tensor names of the folder without mapping it: the index's, else each file's header.
std::vector<std::string> folder_names(const fs::path& dir) {
  std::vector<std::string> names;
  try {
    for (const auto& f : folder_files(dir))
      for (auto& n : header_names(f.string())) names.push_back(std::move(n));
  } catch (const std::exception&) {
    return {};
  }
  return names;
}

}  // namespace

int probe_folder(const std::string& path) {
  std::error_code ec;
  const fs::path dir(path);
  if (!fs::is_directory(dir, ec) || !is_file(dir / "config.json")) return 0;
  bool quant_block = false;
  try {
    quant_block = QuantConfig(read_text(dir / "config.json"), (dir / "config.json").string()).present();
  } catch (const std::exception&) {
    return 0;  // not our config to judge; the safetensors reader reports it
  }
  for (const auto& n : folder_names(dir))
    if ((quant_block && ends_with(n, ".scales")) || n.find(".switch_mlp.") != std::string::npos) return 150;
  return 0;
}

std::unique_ptr<Checkpoint> open_folder(const std::string& path) { return std::make_unique<MlxCheckpoint>(path); }

}  // namespace tandem::mlx
