// YAML profile parsing with strict key and type validation.
#include "tandem/profile.h"

#include <cmath>
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
  bool is_scalar(const std::string& k) const { return n_[k].IsScalar(); }
  std::string path() const { return path_; }
  Node child(const std::string& k) const { return Node(n_[k], src_, key(k)); }

  // A list of scalars.
  template <class T>
  void list(const std::string& k, std::vector<T>& out, const char* what) const {
    if (!has(k)) return;
    const YAML::Node v = n_[k];
    if (!v.IsSequence()) fail(src_, ": key '", key(k), "' must be ", what, ", found ", v.IsScalar() ? "'" + v.Scalar() + "'" : describe(v));
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      try {
        check(v[i].IsScalar(), "");
        out.push_back(v[i].as<T>());
      } catch (const std::exception&) {
        fail(src_, ": key '", key(k), "' must be ", what, ", item ", i, " is '", v[i].IsScalar() ? v[i].Scalar() : describe(v[i]), "'");
      }
    }
  }
  // This mapping's values as text; each must be a scalar.
  std::map<std::string, std::string> scalars() const {
    check(n_.IsMap(), src_, ": '", path_, "' must be a mapping");
    std::map<std::string, std::string> out;
    for (const auto& kv : n_) {
      std::string k = kv.first.as<std::string>();
      if (!kv.second.IsScalar()) fail(src_, ": key '", key(k), "' must be a scalar, found ", describe(kv.second));
      out[k] = kv.second.Scalar();
    }
    return out;
  }

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
  template <class T>
  void get(const std::string& k, std::optional<T>& out, const char* what) const {
    if (!has(k)) return;
    T v{};
    get(k, v, what);
    out = std::move(v);
  }
  // A string, or a list of strings.
  void strings(const std::string& k, std::optional<std::vector<std::string>>& out) const {
    if (!has(k)) return;
    const YAML::Node v = n_[k];
    std::vector<std::string> list;
    if (v.IsScalar()) list.push_back(v.Scalar());
    else if (v.IsSequence())
      for (const auto& e : v) {
        if (!e.IsScalar()) fail(src_, ": key '", key(k), "' must be a string or a list of strings, found a list holding ", describe(e));
        list.push_back(e.Scalar());
      }
    else fail(src_, ": key '", key(k), "' must be a string or a list of strings, found ", describe(v));
    out = std::move(list);
  }

 private:
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  static std::string describe(const YAML::Node& v) { return v.IsMap() ? "a mapping" : v.IsSequence() ? "a list" : "?"; }
  YAML::Node n_;
  std::string src_, path_;
};

void parse_server(const Node& n, const std::string& source, ServerProfile& s) {
  n.only({"host", "port", "api_key", "api_key_file", "metrics_key", "served_model_name", "aliases", "slots",
          "max_queue", "queue_timeout", "max_body_bytes", "default_max_tokens", "prefill_chunk", "batch_rows", "drain_timeout",
          "sse_ping_interval", "strict_fields", "reasoning_budget", "reasoning_budget_message", "reasoning_effort",
          "special_tokens_in_user_content", "prefix_cache_bytes", "prefix_cache_every", "step_tokens"});
  n.get("host", s.host, "an IP address");
  n.get("port", s.port, "an integer");
  n.strings("api_key", s.api_keys);
  n.get("api_key_file", s.api_key_file, "a path");
  n.get("metrics_key", s.metrics_key, "a string");
  n.get("served_model_name", s.served_model_name, "a string");
  n.strings("aliases", s.aliases);
  n.get("slots", s.slots, "an integer");
  n.get("max_queue", s.max_queue, "an integer");
  n.get("queue_timeout", s.queue_timeout, "a number of seconds");
  n.get("max_body_bytes", s.max_body_bytes, "an integer");
  n.get("default_max_tokens", s.default_max_tokens, "an integer");
  n.get("prefill_chunk", s.prefill_chunk, "an integer");
  n.get("step_tokens", s.step_tokens, "an integer number of tokens");
  n.get("prefix_cache_bytes", s.prefix_cache_bytes, "an integer number of bytes");
  n.get("prefix_cache_every", s.prefix_cache_every, "an integer number of tokens");

  n.get("batch_rows", s.batch_rows, "an integer");
  n.get("drain_timeout", s.drain_timeout, "a number of seconds");
  n.get("sse_ping_interval", s.sse_ping_interval, "a number of seconds");
  n.get("strict_fields", s.strict_fields, "true or false");
  n.get("reasoning_budget", s.reasoning_budget, "an integer (-1 = unlimited)");
  n.get("reasoning_budget_message", s.reasoning_budget_message, "a string");
  n.get("reasoning_effort", s.reasoning_effort, "a string");
  n.get("special_tokens_in_user_content", s.special_tokens_in_user_content, "true or false");
  auto at_least = [&](const char* k, auto v, long long lo) {
    if (v) check(*v >= lo, source, ": key 'server.", k, "' must be at least ", lo, ", found ", *v);
  };
  if (s.port) check(*s.port >= 0 && *s.port <= 65535, source, ": key 'server.port' must be in [0, 65535], found ", *s.port);
  at_least("slots", s.slots, 1);
  at_least("max_queue", s.max_queue, 0);
  at_least("default_max_tokens", s.default_max_tokens, 1);
  at_least("prefill_chunk", s.prefill_chunk, 1);
  if (s.batch_rows)
    check(*s.batch_rows >= 1 && *s.batch_rows <= Model::batch_max_rows, source, ": key 'server.batch_rows' must be in [1, ",
          Model::batch_max_rows, "], found ", *s.batch_rows);
  at_least("max_body_bytes", s.max_body_bytes, 1024);
  at_least("reasoning_budget", s.reasoning_budget, -1);
  at_least("prefix_cache_bytes", s.prefix_cache_bytes, 0);
  at_least("prefix_cache_every", s.prefix_cache_every, 0);
  // Checkpoints sit where prefill passes split (the prefill chunk's multiples), or no restored
  // request could compute a cold run's bits.
  // request could compute a cold run's bits. (Without prefill_chunk here, `tandem serve` checks it
  // against the chunk it runs with.)
  at_least("step_tokens", s.step_tokens, 0);
  // A step runs whole chunks and at least one: a budget below the chunk would still run one.
  if (s.step_tokens && *s.step_tokens != 0 && s.prefill_chunk && *s.prefill_chunk >= 1)
    check(*s.step_tokens >= *s.prefill_chunk, source, ": key 'server.step_tokens' must be 0 or at least ",
          "server.prefill_chunk (", *s.prefill_chunk, "), found ", *s.step_tokens);
  if (s.prefix_cache_every && s.prefill_chunk && *s.prefill_chunk >= 1)
    check(*s.prefix_cache_every % *s.prefill_chunk == 0, source, ": key 'server.prefix_cache_every' must be a multiple ",
          "of server.prefill_chunk (", *s.prefill_chunk, "), found ", *s.prefix_cache_every);
  for (auto [k, v] : {std::pair{"queue_timeout", s.queue_timeout}, {"drain_timeout", s.drain_timeout},
                      {"sse_ping_interval", s.sse_ping_interval}})
    if (v) check(*v >= 0, source, ": key 'server.", k, "' must be non-negative, found ", *v);
  if (s.reasoning_effort) {
    static const std::set<std::string> ok = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    check(ok.count(*s.reasoning_effort), source, ": key 'server.reasoning_effort' must be one of none, minimal, low, ",
          "medium, high, xhigh, max; found '", *s.reasoning_effort, "'");
  }
}

// draft: which drafters, their settings (checked by each drafter's factory) and StairCut's knobs.
void parse_draft(const Node& d, const std::string& src, DraftOptions& o) {
  std::set<std::string> allowed = {"drafters", "staircut"};
  if (d.has("drafters")) {
    std::string names;
    if (d.is_scalar("drafters")) {
      d.get("drafters", names, "a list of drafter names");
    } else {
      std::vector<std::string> list;
      d.list("drafters", list, "a list of drafter names");
      for (const auto& n : list) names += (names.empty() ? "" : ",") + n;
    }
    try {
      o.drafters = parse_drafter_names(names);
    } catch (const Error& e) {
      fail(src, ": key 'draft.drafters': ", e.what());
    }
  }
  for (const auto& n : o.drafters) allowed.insert(n);
  d.only(allowed);
  for (const auto& n : o.drafters)
    if (d.has(n)) o.settings[n] = SpeculatorSettings(src, d.path() + "." + n, d.child(n).scalars());
  if (!d.has("staircut")) return;
  Node s = d.child("staircut");
  StairCutOptions& c = o.staircut;
  s.only({"margin", "margin_plain", "persist_steps", "probe_every", "probe_budget", "force_k", "max_k", "halve_after", "cost_ewma",
          "guard_window", "guard_ratio", "guard_plain_steps", "verify_costs", "cost_context", "cost_reps"});
  s.get("margin", c.margin, "a number");
  s.get("margin_plain", c.margin_plain, "a number");
  s.get("persist_steps", c.persist_steps, "an integer");
  s.get("probe_every", c.probe_every, "an integer");
  s.get("probe_budget", c.probe_budget, "a number");
  s.get("force_k", c.force_k, "an integer");
  s.get("max_k", c.max_k, "an integer");
  s.get("halve_after", c.halve_after, "an integer");
  s.get("cost_ewma", c.cost_ewma, "a number");
  s.get("guard_window", c.guard_window, "an integer");
  s.get("guard_ratio", c.guard_ratio, "a number");
  s.get("guard_plain_steps", c.guard_plain_steps, "an integer");
  s.list("verify_costs", o.verify_costs, "a list of seconds");
  s.get("cost_context", o.cost_context, "an integer");
  s.get("cost_reps", o.cost_reps, "an integer");
  auto in = [&](const char* k, double v, double lo, double hi) {
    check(std::isfinite(v) && v >= lo && v <= hi, src, ": key 'draft.staircut.", k, "' must be in [", lo, ", ", hi,
          "], found ", v);
  };
  in("margin", c.margin, 0, 10);
  in("margin_plain", c.margin_plain, 0, 10);
  in("persist_steps", c.persist_steps, 1, 1000);
  in("probe_every", c.probe_every, 0, 1e6);
  in("probe_budget", c.probe_budget, 0, 1);
  in("force_k", c.force_k, -1, 255);
  in("max_k", c.max_k, 1, 255);
  in("halve_after", c.halve_after, 1, 1e9);
  in("cost_ewma", c.cost_ewma, 0, 1);
  in("guard_window", c.guard_window, 0, 1e6);
  in("guard_ratio", c.guard_ratio, 0, 1);
  in("guard_plain_steps", c.guard_plain_steps, 0, 1e6);
  in("cost_context", double(o.cost_context), 1, 1e9);
  in("cost_reps", o.cost_reps, 1, 1000);
  for (size_t i = 0; i < o.verify_costs.size(); ++i)
    check(std::isfinite(o.verify_costs[i]) && o.verify_costs[i] > 0, src, ": key 'draft.staircut.verify_costs' must hold "
          "positive seconds, item ", i, " is ", o.verify_costs[i]);
}

Profile parse_root(const YAML::Node& root, const std::string& source) {
  Profile p;
  p.source = source;
  if (root.IsNull()) fail(source, ": the profile is empty");
  Node top(root, source, "");
  top.only({"model", "format", "device", "threads", "context", "max_tokens", "mamba", "hf_prefill_dt_clamp",
            "sampling", "chat_template", "tokenizer", "server", "draft"});
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
  top.get("chat_template", p.chat_template, "a path to a Jinja chat template");
  top.get("tokenizer", p.tokenizer, "a path to a tokenizer.json");
  if (top.has("server")) parse_server(top.child("server"), source, p.server);
  if (top.has("draft")) parse_draft(top.child("draft"), source, p.draft);
  check(p.context > 0, source, ": key 'context' must be positive, found ", p.context);
  check(p.max_tokens >= 0, source, ": key 'max_tokens' must be non-negative, found ", p.max_tokens);
  check(p.load.threads >= 0, source, ": key 'threads' must be non-negative, found ", p.load.threads);
  for (std::string* path : {&p.load.path, &p.chat_template, &p.tokenizer})
    if (!path->empty() && std::filesystem::path(*path).is_relative())
      *path = (std::filesystem::path(source).parent_path() / *path).lexically_normal().string();
  if (auto& f = p.server.api_key_file; f && !f->empty() && std::filesystem::path(*f).is_relative())
    f = (std::filesystem::path(source).parent_path() / *f).lexically_normal().string();
  return p;
}

}  // namespace

Profile parse_profile(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(source, ": invalid YAML at line ", e.mark.line + 1, ": ", printable(e.msg));
  }
  try {
    return parse_root(root, source);
  } catch (const Error& e) {
    throw Error(printable(e.what()));
  } catch (const YAML::Exception& e) {
    // A node yaml-cpp cannot convert where a scalar key belongs (a mapping or a list as a key).
    fail(source, ": invalid profile", e.mark.is_null() ? std::string() : " at line " + std::to_string(e.mark.line + 1),
         ": ", printable(e.msg));
  }
}

Profile load_profile(const std::string& path) {
  std::ifstream f(path);
  check(f.good(), "profile '", path, "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_profile(ss.str(), path);
}

}  // namespace tandem
