// Reading ModelOpt's quantization config in its two forms (modelopt_config.h).
#include "formats/nvfp4/modelopt_config.h"

#include <fnmatch.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tandem/error.h"
#include "tandem/json_depth.h"

namespace tandem::nvfp4 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLegacyName = "hf_quant_config.json";
constexpr const char* kSupported = "NVFP4, W4A16_NVFP4, FP8, FP8_PER_CHANNEL_PER_TOKEN, MIXED_PRECISION";

constexpr size_t kMaxDepth = 64;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("nvfp4: cannot read '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool parse(const fs::path& p, rapidjson::Document& doc, bool quiet) {
  const std::string text = read_text(p);
  if (json_depth(text) > kMaxDepth) {
    if (quiet) return false;
    fail("nvfp4: '", p.string(), "' nests deeper than ", kMaxDepth, " levels");
  }
  doc.Parse<rapidjson::kParseIterativeFlag>(text.data(), text.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    if (quiet) return false;
    if (doc.HasParseError())
      fail("nvfp4: '", p.string(), "' is not valid JSON: ", rapidjson::GetParseError_En(doc.GetParseError()),
           " at byte ", doc.GetErrorOffset());
    fail("nvfp4: '", p.string(), "': expected a JSON object");
  }
  return true;
}

const rapidjson::Value* member(const rapidjson::Value& v, const char* key) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(key);
  return it == v.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

// The quantization_config of a config.json that says modelopt, else nullptr.
const rapidjson::Value* modelopt_section(const rapidjson::Document& doc) {
  const rapidjson::Value* q = member(doc, "quantization_config");
  const rapidjson::Value* method = q ? member(*q, "quant_method") : nullptr;
  return method && method->IsString() && std::string(method->GetString()) == "modelopt" ? q : nullptr;
}

std::string string_field(const rapidjson::Value& v, const char* key, const std::string& at, bool required) {
  const rapidjson::Value* f = member(v, key);
  if (!f) {
    if (required) fail("nvfp4: ", at, ": field '", key, "' is missing");
    return "";
  }
  if (!f->IsString()) fail("nvfp4: ", at, ": field '", key, "' is not a string");
  return f->GetString();
}

void add_patterns(const rapidjson::Value& v, const char* key, const std::string& at, std::vector<std::string>& out) {
  const rapidjson::Value* f = member(v, key);
  if (!f) return;
  if (!f->IsArray()) fail("nvfp4: ", at, ": field '", key, "' is not a list of module names");
  for (const auto& e : f->GetArray()) {
    if (!e.IsString()) fail("nvfp4: ", at, ": field '", key, "' holds an entry that is not a string");
    out.emplace_back(e.GetString());
  }
}

// Storage for a per-module or uniform algorithm; an error naming the file and value otherwise.
Storage storage_of(const std::string& algo, const std::string& at, const std::string& where) {
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") return Storage::NVFP4;
  if (algo == "FP8" || algo == "FP8_PER_CHANNEL_PER_TOKEN") return Storage::FP8;
  fail("nvfp4: ", at, ": ", where, "quant_algo '", printable(algo), "' is not one tandem reads (", kSupported, ")");
}

void check_group_size(const rapidjson::Value& v, const std::string& at, const std::string& where, int& out) {
  const rapidjson::Value* g = member(v, "group_size");
  if (!g) return;
  if (!g->IsInt()) fail("nvfp4: ", at, ": ", where, "group_size is not an integer");
  out = g->GetInt();
  if (out != 16) fail("nvfp4: ", at, ": ", where, "group_size is ", out, ", NVFP4 uses 16");
}

// The fields common to both forms, from the object `q` that holds quant_algo.
QuantConfig read_fields(const rapidjson::Value& q, const std::string& file) {
  QuantConfig c;
  c.file = file;
  c.quant_algo = string_field(q, "quant_algo", file, true);
  if (!c.mixed()) {
    if (storage_of(c.quant_algo, file, "") == Storage::NVFP4) check_group_size(q, file, "", c.group_size);
  }
  add_patterns(q, "exclude_modules", file, c.exclude);
  add_patterns(q, "ignore", file, c.exclude);
  if (const rapidjson::Value* groups = member(q, "config_groups"); groups && groups->IsObject())
    for (const auto& g : groups->GetObject())
      if (const rapidjson::Value* w = member(g.value, "weights"))
        check_group_size(*w, file, "config_groups." + printable(g.name.GetString()) + ".weights: ", c.group_size);
  if (const rapidjson::Value* kv = member(q, "kv_cache_quant_algo")) {
    if (!kv->IsString()) fail("nvfp4: ", file, ": field 'kv_cache_quant_algo' is not a string");
    c.kv_cache_quant_algo = kv->GetString();
  } else if (member(q, "kv_cache_scheme")) {
    c.kv_cache_quant_algo = "kv_cache_scheme";
  }
  const rapidjson::Value* layers = member(q, "quantized_layers");
  if (c.mixed()) {
    if (!layers || !layers->IsObject())
      fail("nvfp4: ", file, ": quant_algo MIXED_PRECISION needs a 'quantized_layers' object");
    for (const auto& m : layers->GetObject()) {
      const std::string name = m.name.GetString(), where = "quantized_layers['" + printable(name) + "']: ";
      if (!m.value.IsObject()) fail("nvfp4: ", file, ": ", where, "expected an object with quant_algo");
      const std::string algo = string_field(m.value, "quant_algo", file + ": " + where, true);
      const Storage s = storage_of(algo, file, where);
      if (s == Storage::NVFP4) {
        int g = 16;
        check_group_size(m.value, file, where, g);
      }
      c.layers[name] = s;
    }
  }
  return c;
}

}  // namespace


const char* storage_name(Storage s) {
  switch (s) {
    case Storage::NVFP4: return "NVFP4";
    case Storage::FP8: return "FP8";
    default: return "dense (BF16/F16/F32)";
  }
}

Storage QuantConfig::uniform() const { return storage_of(quant_algo, file, ""); }

std::string QuantConfig::excluded_by(const std::string& module) const {
  for (const std::string& p : exclude) {
    // A pattern names the module itself or one of its parents ("backbone.layers.3.mixer" covers its
    // projections), with fnmatch's wildcards (a '*' also crosses dots, as Python's fnmatch does).
    std::string m = module;
    for (;;) {
      if (fnmatch(p.c_str(), m.c_str(), 0) == 0) return p;
      const size_t dot = m.rfind('.');
      if (dot == std::string::npos) break;
      m.resize(dot);
    }
  }
  return "";
}

bool has_modelopt_config(const fs::path& dir) {
  if (is_file(dir / kLegacyName)) return true;
  if (!is_file(dir / "config.json")) return false;
  rapidjson::Document doc;
  return parse(dir / "config.json", doc, true) && modelopt_section(doc) != nullptr;
}

std::optional<QuantConfig> read_quant_config(const fs::path& dir) {
  if (is_file(dir / kLegacyName)) {
    const fs::path p = dir / kLegacyName;
    rapidjson::Document doc;
    parse(p, doc, false);
    const rapidjson::Value* q = member(doc, "quantization");
    if (!q || !q->IsObject()) fail("nvfp4: '", p.string(), "': field 'quantization' missing or not an object");
    return read_fields(*q, p.string());
  }
  if (!is_file(dir / "config.json")) return std::nullopt;
  rapidjson::Document doc;
  if (!parse(dir / "config.json", doc, true)) return std::nullopt;
  const rapidjson::Value* q = modelopt_section(doc);
  if (!q) return std::nullopt;
  return read_fields(*q, (dir / "config.json").string() + " (quantization_config)");
}

}  // namespace tandem::nvfp4
