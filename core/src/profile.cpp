// YAML profile parsing with strict key and type validation.
#include "tandem/profile.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "tandem/error.h"

namespace tandem {
namespace {

class Node {
 public:
  Node(const YAML::Node& n, std::string src, std::string path) : n_(n), src_(std::move(src)), path_(std::move(path)) {}

  // Rejects keys not in `allowed`.
  void only(const std::set<std::string>& allowed) const {
    check(n_.IsMap(), src_, ": '", path_.empty() ? "(top level)" : path_, "' must be a mapping");
    for (const auto& kv : n_) {
      std::string k = kv.first.as<std::string>();
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(src_, ": unknown key '", key(k), "' (expected one of: ", list, ")");
      }
    }
  }
  bool has(const std::string& k) const { return n_[k].IsDefined() && !n_[k].IsNull(); }
  Node child(const std::string& k) const { return Node(n_[k], src_, key(k)); }

  template <class T>
  void get(const std::string& k, T& out, const char* what) const {
    if (!has(k)) return;
    const YAML::Node v = n_[k];
    try {
      check(v.IsScalar(), "");
      if constexpr (std::is_same_v<T, bool>) {
        std::string s = v.Scalar();
        check(s == "true" || s == "false", "");
      }
      out = v.as<T>();
    } catch (const std::exception&) {
      fail(src_, ": key '", key(k), "' must be ", what, ", found '", v.IsScalar() ? v.Scalar() : describe(v), "'");
    }
  }

 private:
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  static std::string describe(const YAML::Node& v) { return v.IsMap() ? "a mapping" : v.IsSequence() ? "a list" : "?"; }
  YAML::Node n_;
  std::string src_, path_;
};

}  // namespace

Profile parse_profile(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(source, ": invalid YAML at line ", e.mark.line + 1, ": ", e.msg);
  }
  Profile p;
  p.source = source;
  if (root.IsNull()) fail(source, ": the profile is empty");
  Node top(root, source, "");
  top.only({"model", "format", "device", "threads", "context", "max_tokens", "mamba", "hf_prefill_dt_clamp",
            "sampling"});
  top.get("model", p.load.path, "a path");
  top.get("format", p.load.format, "a format plugin name or 'auto'");
  top.get("device", p.load.device, "a device name (cpu, cuda)");
  top.get("threads", p.load.threads, "an integer");
  top.get("context", p.context, "an integer");
  top.get("max_tokens", p.max_tokens, "an integer");
  top.get("mamba", p.load.mamba, "a layer plugin name");
  top.get("hf_prefill_dt_clamp", p.load.hf_prefill_dt_clamp, "true or false");
  if (top.has("sampling")) {
    Node s = top.child("sampling");
    s.only({"temperature", "top_k", "top_p", "min_p", "seed"});
    s.get("temperature", p.sampling.temperature, "a number");
    s.get("top_k", p.sampling.top_k, "an integer");
    s.get("top_p", p.sampling.top_p, "a number");
    s.get("min_p", p.sampling.min_p, "a number");
    s.get("seed", p.sampling.seed, "a non-negative integer");
  }
  check(p.context > 0, source, ": key 'context' must be positive, found ", p.context);
  check(p.max_tokens >= 0, source, ": key 'max_tokens' must be non-negative, found ", p.max_tokens);
  check(p.load.threads >= 0, source, ": key 'threads' must be non-negative, found ", p.load.threads);
  if (!p.load.path.empty() && std::filesystem::path(p.load.path).is_relative())
    p.load.path = (std::filesystem::path(source).parent_path() / p.load.path).lexically_normal().string();
  return p;
}

Profile load_profile(const std::string& path) {
  std::ifstream f(path);
  check(f.good(), "profile '", path, "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_profile(ss.str(), path);
}

}  // namespace tandem
