// `tandem bench`: loads a model (a file, or a synthetic one straight into device memory), measures the
// device's copy bandwidth, decode at batch 1 (and the kernels its graph launches), verify of k = 1..15
// tokens, prefill at several prompt lengths and, when decode is far from its roofline (or when asked),
// the time per layer kind beside that kind's bytes at copy bandwidth; with
// --draft, drafted decode of the same prompt (bench_draft.h); with --asks, the §6 protocol instead.
#include "cmd_bench.h"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "bench_asks.h"
#include "bench_concurrent.h"
#include "bench_draft.h"
#include "cli.h"
#include "tandem/slot_scheduler.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/generate.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/text/text_codec.h"

namespace tandem::cli {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// Bytes per decoded token of Bolt-shape in NVIDIA's 2-bit GGUF mix (spec/nemotron_h.md § 13.4 (b)).
constexpr size_t kBoltIq2DecodeBytes = 4821477952ull;

struct Prefill {
  int64_t tokens = 0;
  double seconds = 0;      // 0 when skipped
  std::string skipped;     // why, when skipped
};

struct KindTime {
  std::string kind;        // "embedding", "mamba", "attention", "moe", "mlp", "head", "logits+host"
  int layers = 0;
  double ms_per_token = 0;
  size_t bytes = 0;        // weight bytes it reads per token (Model::decode_parts)
  size_t state_bytes = 0;  // state bytes it moves per token, mean of the timed steps (Model::decode_state_bytes)
  double floor_us = 0;     // (bytes + state_bytes) at the copy bandwidth, µs per token (0 = not measured)

  double us_per_layer() const { return layers ? ms_per_token * 1e3 / layers : 0; }
  double floor_us_per_layer() const { return layers ? floor_us / layers : 0; }
  double over_floor() const { return floor_us > 0 ? ms_per_token * 1e3 / floor_us : 0; }
};

// The nodes of the backend graph of a pass of `rows` rows (GraphStats::launches), or why unknown.
struct PassLaunches {
  int rows = 0;
  int64_t kernels = -1, copies = -1;
  std::string unknown;  // why the counts are unknown; "" when known
};

// What the launch counts cover: a pass's graph starts after the embedding (model.cpp, Model::forward).
constexpr const char* kLaunchesCounted =
    "graph nodes: every layer and the head; outside the graph each step, not counted: the position upload, the "
    "embedding lookup, the logits download; sampling runs on the host";

struct Report {
  std::string command, date, commit, model, format, device, pattern;
  std::vector<ConcurrentRun> concurrent;  // --concurrent
  size_t weight_bytes = 0, decode_bytes = 0, plan_decode_bytes = 0, spec_decode_bytes = 0, host_bytes = 0;
  int64_t params = 0, active_params = 0;
  double gen_seconds = 0, load_seconds = 0;
  double bandwidth = 0;              // bytes/s, read + written
  int prompt_tokens = 0, decode_tokens = 0;
  int64_t context = 0;
  double decode_seconds = 0;
  std::vector<double> verify_seconds;  // k = 1..K, median
  std::vector<Prefill> prefill;
  int64_t prefill_chunk = 0;
  std::vector<KindTime> profile;
  PassLaunches decode_launches, verify_launches;  // verify: at k = min(8, --verify-max)
  std::vector<DraftRun> drafting;
  int profile_steps = 0;
  size_t peak_memory = 0;

  double decode_tps() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
  double roofline_tps() const { return bandwidth > 0 && decode_bytes > 0 ? bandwidth / double(decode_bytes) : 0; }
  double fraction() const { return roofline_tps() > 0 ? decode_tps() / roofline_tps() : 0; }
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

// $TANDEM_COMMIT when set (a build tree carried to a machine without the repository), else git's.
std::string git_commit() {
  if (const char* c = std::getenv("TANDEM_COMMIT"); c && *c) return c;
  std::FILE* p = ::popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (!p) return "unknown";
  char b[64] = {};
  std::string s = std::fgets(b, sizeof b, p) ? b : "";
  ::pclose(p);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> v = cli::positive_list(list, "tandem bench: --prefill", "token counts");
  std::sort(v.begin(), v.end());
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Read right after the passes of `rows` rows ran, before other passes replace the entry.
PassLaunches pass_launches(Model& model, int rows) {
  const GraphStats& gs = model.graph_stats();
  PassLaunches p;
  p.rows = rows;
  const auto it = gs.launches.find(rows);
  if (!gs.enabled) p.unknown = "graphs off: " + gs.off_reason;
  else if (it == gs.launches.end()) p.unknown = "no pass of " + std::to_string(rows) + " rows ran from a graph";
  else if (it->second.kernels < 0) p.unknown = "backend '" + model.backend().device() + "' does not count graph nodes";
  else p.kernels = it->second.kernels, p.copies = it->second.copies;
  return p;
}

std::string launches_text(const PassLaunches& p) {
  if (!p.unknown.empty()) return "unknown (" + p.unknown + ")";
  return std::to_string(p.kernels) + " kernels (+" + std::to_string(p.copies) + " copies)";
}

// Decode steps with a synchronize after the embedding, every layer and the head: where the time of a
// step goes, by layer kind. The synchronizations add a little to every stage; the totals say how much.
std::vector<KindTime> profile_layers(Model& model, const std::vector<int32_t>& prompt, int64_t context, int steps,
                                     double bandwidth) {
  const ModelDesc& d = model.desc();
  Backend& be = model.backend();
  const int n = int(d.layers.size());
  std::vector<double> stage(size_t(n) + 2, 0.0);  // [0] embedding, [1 + i] layer i, [n + 1] head
  double total = 0;
  clock_type::time_point last;
  model.set_forward_observer([&](int s, const Tensor&) {
    be.synchronize();
    const auto now = clock_type::now();
    stage[size_t(s + 1)] += std::chrono::duration<double>(now - last).count();
    last = now;
  });
  // The decode loop itself (tandem::generate), timed from one token to the next: two warm-up steps,
  // then `steps`. Each step is synchronized at its start, as the observer's first stage expects.
  GenerateOptions g;
  g.context = context;
  g.stop_at_eos = false;
  g.max_tokens = steps + 3;
  int seen = 0;
  clock_type::time_point t0;
  generate(model, prompt, g, [&](int32_t) {
    be.synchronize();
    const auto now = clock_type::now();
    if (seen >= 3) total += std::chrono::duration<double>(now - t0).count();
    if (++seen == 3) std::fill(stage.begin(), stage.end(), 0.0);  // the prefill and two warm-up steps
    t0 = last = now;
    return true;
  });
  model.set_forward_observer(nullptr);

  std::map<std::string, KindTime> kinds;
  auto add = [&](const std::string& k, double sec, bool layer) {
    KindTime& t = kinds[k];
    t.kind = k;
    t.ms_per_token += sec * 1e3 / steps;
    t.layers += layer;
  };
  add("embedding", stage[0], false);
  for (int i = 0; i < n; ++i) add(layer_kind_name(d.layers[size_t(i)].kind), stage[size_t(i) + 1], true);
  add("head", stage[size_t(n) + 1], false);
  double staged = 0;
  for (double s : stage) staged += s;
  add("logits+host", total - staged, false);
  // Bytes from the loaded model: weights per part, and state at the timed steps' positions (the prompt,
  // then the tokens of the prefill and the two warm-up steps: prompt + 2 … prompt + steps + 1).
  const DecodeParts& parts = model.decode_parts();
  kinds["embedding"].bytes = parts.embedding;
  kinds["head"].bytes = parts.head;
  for (int i = 0; i < n; ++i) {
    KindTime& t = kinds[layer_kind_name(d.layers[size_t(i)].kind)];
    t.bytes += parts.layers[size_t(i)];
    double state = 0;
    for (int s = 0; s < steps; ++s)
      state += double(model.decode_state_bytes(size_t(i), int64_t(prompt.size()) + 2 + s));
    t.state_bytes += size_t(state / steps + 0.5);
  }
  for (auto& [k, t] : kinds)
    if (bandwidth > 0 && t.bytes + t.state_bytes > 0) t.floor_us = double(t.bytes + t.state_bytes) / bandwidth * 1e6;
  std::vector<KindTime> out;
  for (const char* k : {"embedding", "mamba", "attention", "moe", "mlp", "head", "logits+host"})
    if (kinds.count(k)) out.push_back(kinds[k]);
  return out;
}

void write_json(const Report& r, const std::string& path) {
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  auto str = [&](const char* k, const std::string& v) { w.Key(k), w.String(v.c_str()); };
  auto num = [&](const char* k, double v) { w.Key(k), w.Double(v); };
  auto u64 = [&](const char* k, uint64_t v) { w.Key(k), w.Uint64(v); };
  w.StartObject();
  str("command", r.command);
  str("date", r.date);
  str("commit", r.commit);
  str("model", r.model);
  str("format", r.format);
  str("device", r.device);
  str("pattern", r.pattern);
  u64("parameters", uint64_t(r.params));
  u64("active_parameters", uint64_t(r.active_params));
  u64("weight_bytes", r.weight_bytes);
  num("synth_seconds", r.gen_seconds);
  u64("synth_host_bytes", r.host_bytes);
  num("load_seconds", r.load_seconds);
  w.Key("bytes_per_token");
  w.StartObject();
  u64("model", r.decode_bytes);
  u64("plan", r.plan_decode_bytes);
  u64("spec", r.spec_decode_bytes);
  w.Key("plan_matches_spec");
  if (r.spec_decode_bytes) w.Bool(r.plan_decode_bytes == r.spec_decode_bytes);
  else w.Null();
  w.EndObject();
  num("copy_bandwidth_bytes_per_s", r.bandwidth);
  w.Key("decode");
  w.StartObject();
  u64("prompt_tokens", uint64_t(r.prompt_tokens));
  u64("tokens", uint64_t(r.decode_tokens));
  u64("context", uint64_t(r.context));
  num("seconds", r.decode_seconds);
  num("tokens_per_s", r.decode_tps());
  num("roofline_tokens_per_s", r.roofline_tps());
  num("roofline_fraction", r.fraction());
  w.EndObject();
  w.Key("launches_per_token");
  w.StartObject();
  str("counted", kLaunchesCounted);
  for (const auto& [key, p] : {std::pair{"decode", &r.decode_launches}, std::pair{"verify", &r.verify_launches}}) {
    w.Key(key);
    w.StartObject();
    u64("rows", uint64_t(p->rows));
    w.Key("kernels");
    if (p->kernels >= 0) w.Int64(p->kernels);
    else w.Null();
    w.Key("copies");
    if (p->copies >= 0) w.Int64(p->copies);
    else w.Null();
    str("unknown", p->unknown);
    w.EndObject();
  }
  w.EndObject();
  w.Key("verify");
  w.StartArray();
  for (size_t i = 0; i < r.verify_seconds.size(); ++i) {
    w.StartObject();
    u64("k", i + 1);
    num("seconds", r.verify_seconds[i]);
    num("relative_to_k1", r.verify_seconds[0] > 0 ? r.verify_seconds[i] / r.verify_seconds[0] : 0);
    num("relative_to_decode_step", r.decode_tps() > 0 ? r.verify_seconds[i] * r.decode_tps() : 0);
    w.EndObject();
  }
  w.EndArray();
  u64("prefill_chunk", uint64_t(r.prefill_chunk));
  w.Key("prefill");
  w.StartArray();
  for (const Prefill& p : r.prefill) {
    w.StartObject();
    u64("tokens", uint64_t(p.tokens));
    if (p.skipped.empty()) {
      num("seconds", p.seconds);
      num("tokens_per_s", double(p.tokens) / p.seconds);
    } else {
      str("skipped", p.skipped);
    }
    w.EndObject();
  }
  w.EndArray();
  u64("peak_memory_bytes", r.peak_memory);
  if (!r.drafting.empty()) {
    w.Key("drafting");
    write_draft_runs(w, r.drafting);
  }
  if (!r.concurrent.empty()) write_concurrent(w, r.concurrent);
  w.Key("layer_profile");
  w.StartObject();
  u64("steps", uint64_t(r.profile_steps));
  w.Key("kinds");
  w.StartArray();
  for (const KindTime& k : r.profile) {
    w.StartObject();
    str("kind", k.kind);
    u64("layers", uint64_t(k.layers));
    num("ms_per_token", k.ms_per_token);
    num("us_per_layer", k.us_per_layer());
    u64("weight_bytes_per_token", k.bytes);
    u64("state_bytes_per_token", k.state_bytes);
    num("bytes_per_s", k.ms_per_token > 0 ? double(k.bytes) / (k.ms_per_token * 1e-3) : 0);
    num("floor_us_per_token", k.floor_us);
    num("floor_us_per_layer", k.floor_us_per_layer());
    num("measured_over_floor", k.over_floor());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  std::ofstream f(path, std::ios::trunc);
  f << sb.GetString() << "\n";
  f.close();
  check(bool(f), "tandem bench: cannot write '", path, "'");
}

void print_table(const Report& r) {
  auto gb = [](double b) { return b * 1e-9; };
  std::printf("tandem bench  %s  (%s, %s)  commit %s  %s\n", r.model.c_str(), r.format.c_str(), r.device.c_str(),
              r.commit.c_str(), r.date.c_str());
  std::printf("  %-22s %zu layers, %s\n", "model", r.pattern.size(), r.pattern.c_str());
  std::printf("  %-22s %.2f GB on the device, loaded in %.1f s", "weights", gb(double(r.weight_bytes)), r.load_seconds);
  if (r.host_bytes) std::printf(" (synthesized in %.1f s, %.2f GB of host memory)", r.gen_seconds, gb(double(r.host_bytes)));
  std::printf("\n  %-22s %zu B (model)", "weight bytes / token", r.decode_bytes);
  if (r.plan_decode_bytes) std::printf(", %zu B (plan)", r.plan_decode_bytes);
  if (r.spec_decode_bytes)
    std::printf(", spec § 13.4: %zu B (%s)", r.spec_decode_bytes,
                r.plan_decode_bytes == r.spec_decode_bytes ? "match" : "MISMATCH");
  if (r.bandwidth > 0) std::printf("\n  %-22s %.1f GB/s (read + write)\n", "copy bandwidth", gb(r.bandwidth));
  else std::printf("\n  %-22s not measured\n", "copy bandwidth");
  std::printf("  %-22s %.2f tok/s (%.3f ms/token; %d tokens after a %d-token prompt, context %lld)\n", "decode",
              r.decode_tps(), 1e3 / std::max(r.decode_tps(), 1e-9), r.decode_tokens, r.prompt_tokens,
              (long long)r.context);
  if (r.roofline_tps() > 0)
    std::printf("  %-22s %.1f tok/s; decode reaches %.1f %%\n", "roofline (weights)", r.roofline_tps(), 100 * r.fraction());
  const PassLaunches &dl = r.decode_launches, &vl = r.verify_launches;
  if (!dl.unknown.empty() && dl.unknown == vl.unknown) {
    std::printf("  %-22s %s", "launches per token", launches_text(dl).c_str());
  } else {
    std::printf("  %-22s decode: %s; verify k=%d: %s per pass", "launches per token", launches_text(dl).c_str(),
                vl.rows, launches_text(vl).c_str());
    std::printf("\n  %-22s (%s)", "", kLaunchesCounted);
  }
  std::printf("\n  %-22s", "verify k: cost / k=1");
  for (size_t i = 0; i < r.verify_seconds.size(); ++i)
    std::printf(" %zu:%.2f", i + 1, r.verify_seconds[i] / r.verify_seconds[0]);
  std::printf("\n  %-22s", ("prefill (chunk " + std::to_string(r.prefill_chunk) + ")").c_str());
  for (const Prefill& p : r.prefill) {
    if (p.skipped.empty()) std::printf(" %lld: %.4g tok/s;", (long long)p.tokens, double(p.tokens) / p.seconds);
    else std::printf(" %lld: skipped (%s);", (long long)p.tokens, p.skipped.c_str());
  }
  std::printf("\n  %-22s %.2f GB\n", "peak device memory", gb(double(r.peak_memory)));
  if (!r.profile.empty()) {
    std::printf("  per layer kind, %d decode steps synchronized after every layer; floor: weight + state bytes at "
                "the copy bandwidth:\n", r.profile_steps);
    // Widths one more where a header holds a two-byte character (µ, ×): printf counts bytes.
    std::printf("    %-12s %6s %10s %11s %15s %14s %8s %11s %12s %9s\n", "kind", "layers", "ms/token", "µs/layer",
                "weight B/token", "state B/token", "GB/s", "floor µs", "floor/layer", "×floor");
    for (const KindTime& k : r.profile) {
      std::printf("    %-12s %6d %10.3f", k.kind.c_str(), k.layers, k.ms_per_token);
      if (k.layers) std::printf(" %10.1f", k.us_per_layer());
      else std::printf(" %10s", "-");
      std::printf(" %15zu %14zu %8.1f", k.bytes, k.state_bytes,
                  k.ms_per_token > 0 ? double(k.bytes) / (k.ms_per_token * 1e-3) * 1e-9 : 0.0);
      if (k.floor_us > 0) std::printf(" %10.2f", k.floor_us);
      else std::printf(" %10s", "-");
      if (k.floor_us > 0 && k.layers) std::printf(" %12.2f", k.floor_us_per_layer());
      else std::printf(" %12s", "-");
      if (k.floor_us > 0) std::printf(" %8.1f\n", k.over_floor());
      else std::printf(" %8s\n", "-");
    }
  }
  for (const DraftRun& d : r.drafting) print_draft_run(d);
  print_concurrent(r.concurrent);
}

// One set of --draft: the profile's drafting settings (StairCut knobs, settings of the drafters
// named) with --draft-k, --draft-max-k and --draft-cost-context applied.
DraftOptions draft_set(DraftOptions o, const std::vector<std::string>& names, const cli::Args& a) {
  o.drafters = names;
  std::erase_if(o.settings,
                [&](const auto& kv) { return std::find(names.begin(), names.end(), kv.first) == names.end(); });
  o.staircut.force_k = int(a.integer("draft-k", o.staircut.force_k));
  o.staircut.max_k = int(a.integer("draft-max-k", o.staircut.max_k));
  o.cost_context = a.integer("draft-cost-context", o.cost_context);
  // --draft-setting NAME.KEY=VALUE[,…]: a drafter's profile key set from the command line (e.g.
  // lilicorr.profile=true for its stage times); the drafter checks the key like a profile's.
  std::stringstream list(a.str("draft-setting"));
  for (std::string kv; std::getline(list, kv, ',');) {
    const size_t dot = kv.find('.'), eq = kv.find('=');
    check(dot != std::string::npos && eq != std::string::npos && dot > 0 && eq > dot + 1,
          "tandem bench: --draft-setting expects NAME.KEY=VALUE, found '", kv, "'");
    const std::string name = kv.substr(0, dot);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;  // another set's drafter
    auto it = o.settings.find(name);
    if (it == o.settings.end())
      it = o.settings.emplace(name, SpeculatorSettings("--draft-setting", "draft." + name, {})).first;
    it->second.set(kv.substr(dot + 1, eq - dot - 1), kv.substr(eq + 1));
  }
  check(o.staircut.force_k >= -1, "tandem bench: --draft-k must be at least 0");
  check(o.staircut.max_k >= 1 && o.staircut.max_k <= 255, "tandem bench: --draft-max-k must be in [1, 255]");
  check(o.cost_context >= 1, "tandem bench: --draft-cost-context must be at least 1");
  return o;
}

}  // namespace

const CommandSpec& bench_spec() {
  static const CommandSpec spec{
      "bench",
      "Decode, verify and prefill speed of a model (--config/--model) or a synthetic one (--synth); context 32768 "
      "unless given.",
      with_model_flags({
          {"synth", "SHAPE", "a synthetic model built in memory (tiny|nano|bolt|super) instead of --model"},
          {"mix", "M", "the synthetic model's weight mix (gguf-iq2|bf16|exl3-2|nvfp4|gguf-TYPE, as tandem synth; default gguf-iq2)"},
          {"uniform", "", "synthetic: every layer the same kind"},
          {"seed", "S", "random seed"},
          {"json", "FILE", "write every number to FILE"},
          {"decode-tokens", "N", "tokens decoded (default 512)"},
          {"draft-setting", "NAME.KEY=V[,...]", "a drafter's setting for --draft (lilicorr.profile=true: stage times)"},
          {"prompt-tokens", "N", "prompt length before decoding (default 32)"},
          {"verify-max", "K", "verify passes of 1..K tokens timed (default 15)"},
          {"verify-reps", "N", "repetitions per verify size (default 5)"},
          {"prefill", "N,N,...", "prefill lengths timed (default 512,8192,32768)"},
          {"prefill-budget", "S", "seconds the prefill sizes may take in all"},
          {"prefill-chunk", "N", "prompt tokens per prefill step (serve's)"},
          {"profile-layers", "", "time every layer kind (with --concurrent: also each batched step's)"},
          {"no-profile", "", "skip the per-layer profile"},
          {"profile-steps", "N", "decode steps the profile times"},
          {"draft", "SET[:SET...]", "drafted decode of the same prompt per SET (NAME[,NAME...])"},
          {"concurrent", "S,S,...", "decode S streams at once per count (one batched pass a step), against solo runs"},
          {"draft-k", "K", "verify K drafts every step"},
          {"draft-max-k", "K", "StairCut's largest K"},
          {"draft-cost-context", "N", "context at which verify costs are measured"},
          {"asks", "", "the five-ask protocol of docs/benchmarks.md (needs a chat template)"},
          {"asks-tokens", "N", "tokens per ask"},
          {"asks-runs", "N", "runs per ask"},
      }), "", ""};
  return spec;
}

int cmd_bench(const std::vector<std::string>& argv) {
  cli::Args a(argv, bench_spec());
  const bool synthetic = a.has("synth");
  check(synthetic != (a.has("model") || a.has("config")), "tandem bench: give --synth SHAPE, or --model/--config");
  Profile p;
  if (synthetic) {
    p.load.device = a.str("device", "cpu");
    p.load.threads = int(a.integer("threads", 0));
    p.context = a.integer("context", 32768);
  } else {
    p = cli::resolve_profile(a);
    if (!a.has("context")) p.context = 32768;
  }
  Report r;
  for (const auto& s : argv) r.command += (r.command.empty() ? "tandem bench " : " ") + s;
  r.date = now_utc();
  r.commit = git_commit();
  r.device = p.load.device;
  r.context = p.context;
  r.prompt_tokens = int(a.integer("prompt-tokens", 32));
  r.decode_tokens = int(a.integer("decode-tokens", 512));
  const int verify_max = int(a.integer("verify-max", 15)), verify_reps = int(a.integer("verify-reps", 5));
  const std::vector<int64_t> sizes = parse_sizes(a.str("prefill", "512,8192,32768"));
  const double budget = a.number("prefill-budget", p.load.device == "cpu" ? 30.0 : 120.0);
  r.prefill_chunk = a.integer("prefill-chunk", kDefaultPrefillChunk);  // serve's; the arithmetic is in slots.h
  const uint64_t seed = uint64_t(a.integer("seed", 0));
  check(r.prompt_tokens >= 1 && r.decode_tokens >= 1 && verify_max >= 1 && verify_reps >= 1 && r.prefill_chunk >= 1,
        "tandem bench: --prompt-tokens, --decode-tokens, --verify-max, --verify-reps and --prefill-chunk must be at "
        "least 1");
  check(r.prompt_tokens + r.decode_tokens + 1 <= p.context && r.prompt_tokens + verify_max <= p.context,
        "tandem bench: the prompt and the tokens to decode exceed --context ", p.context);
  const bool asks = a.flag("asks");
  check(!asks || !synthetic, "tandem bench --asks needs a model with a tokenizer and a chat template (--model or "
        "--config), not --synth");
  std::vector<std::vector<std::string>> draft_sets;
  if (a.has("draft")) draft_sets = parse_draft_sets(a.str("draft"));
  check(!a.has("draft-k") || !draft_sets.empty() || asks, "tandem bench: --draft-k needs --draft");
  const DraftOptions draft_base = synthetic ? DraftOptions{} : p.draft;
  const std::vector<int> stream_counts = a.has("concurrent") ? parse_stream_counts(a.str("concurrent")) : std::vector<int>{};

  PluginRegistry reg;
  reg.load_default();
  if (asks) {
    check(draft_sets.size() <= 1, "tandem bench --asks takes one set of drafters (--draft NAME[,NAME…])");
    AsksOptions o;
    o.tokens = int(a.integer("asks-tokens", 512));
    o.runs = int(a.integer("asks-runs", 3));
    o.context = p.context;
    o.draft = draft_set(draft_base, draft_sets.empty() ? draft_base.drafters : draft_sets[0], a);
    o.json = a.str("json", "");
    o.command = r.command, o.commit = r.commit, o.date = r.date, o.model = p.load.path;
    p.load.progress = cli::progress_printer("loading weights");
    std::string format_name;  // the checkpoint is opened once: codec from its side files, then the model
    std::unique_ptr<Checkpoint> checkpoint = open_checkpoint(p.load, reg, &format_name);
    const std::shared_ptr<TextCodec> codec = make_text_codec(p, *checkpoint);
    auto model = Model::load(std::move(checkpoint), format_name, p.load, reg);
    run_asks(*model, reg, *codec, o);
    return 0;
  }
  // The copy bandwidth first, on a backend of its own, while the device is still empty.
  r.bandwidth = reg.backend(p.load.device)->measure_copy_bandwidth();
  std::unique_ptr<Model> model;
  std::optional<synth::Plan> plan;
  if (synthetic) {
    const synth::MixSpec mix = synth::parse_mix(a.str("mix", "gguf-iq2"));
    plan = synth::make_plan(synth::model_shape(a.str("synth"), a.flag("uniform")), mix, &reg);
    r.model = "synth:" + a.str("synth") + (a.flag("uniform") ? "-uniform" : "") + "/" + plan->mix_label;
    r.plan_decode_bytes = plan->totals.decode_bytes;
    r.params = plan->totals.params, r.active_params = plan->totals.active;
    if (a.str("synth") == "bolt" && !a.flag("uniform") && mix.mix == synth::Mix::GgufIq2) r.spec_decode_bytes = kBoltIq2DecodeBytes;
    if (p.load.threads >= 0) set_thread_count(p.load.threads);
    auto t0 = clock_type::now();
    auto ck = std::make_unique<synth::SynthCheckpoint>(*plan, seed, r.model);
    r.gen_seconds = since(t0);
    r.host_bytes = ck->host_bytes();
    t0 = clock_type::now();
    model = Model::load(std::move(ck), std::string("synth ") + plan->mix_label, p.load, reg);
    r.load_seconds = since(t0);
  } else {
    r.model = p.load.path;
    const auto t0 = clock_type::now();
    model = Model::load(p.load, reg);
    r.load_seconds = since(t0);
  }
  Backend& be = model->backend();
  be.synchronize();
  r.format = model->format_name();
  r.pattern = model->desc().pattern();
  r.weight_bytes = model->weight_bytes();
  r.decode_bytes = model->decode_bytes();

  Rng rng(seed + 1);
  const int64_t vocab = model->desc().vocab;
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng.next() % uint64_t(vocab));
    return t;
  };
  const std::vector<int32_t> prompt = random_tokens(r.prompt_tokens);

  // Decode, as `tandem generate` runs it (greedy, logits back on the host every step).
  GenerateOptions g;
  g.context = p.context;
  g.stop_at_eos = false;
  g.prefill_chunk = int(r.prefill_chunk);  // one pass of a long prompt would need ~0.48 MB a token
  g.max_tokens = std::min(8, r.decode_tokens + 1);
  generate(*model, prompt, g);  // warm-up
  g.max_tokens = r.decode_tokens + 1;
  const GenerateResult plain = generate(*model, prompt, g);
  r.decode_seconds = plain.decode_seconds;
  std::fprintf(stderr, "decode: %.2f tok/s\n", r.decode_tps());
  const GraphStats& gs = model->graph_stats();
  if (gs.replayed > 0)
    std::fprintf(stderr, "decode: graphs used (%lld recorded, %lld passes replayed, %lld op by op)\n",
                 (long long)gs.captured, (long long)gs.replayed, (long long)gs.eager);
  else
    std::fprintf(stderr, "decode: graphs not used (%s)\n", gs.off_reason.empty() ? "none recorded" : gs.off_reason.c_str());
  r.decode_launches = pass_launches(*model, 1);

  // Verify: k tokens in one pass at the same position, none accepted.
  {
    auto seq = model->new_sequence(p.context);
    std::vector<float> logits;
    prefill(*model, *seq, prompt, int(r.prefill_chunk), logits);
    for (int k = 1; k <= verify_max; ++k) {
      const std::vector<int32_t> draft = random_tokens(k);
      std::vector<double> t;
      for (int rep = 0; rep <= verify_reps; ++rep) {
        const auto t0 = clock_type::now();
        model->forward(*seq, draft, ForwardMode::Verify, logits, true);
        if (rep > 0) t.push_back(since(t0));  // the first is a warm-up
        model->commit(*seq, 0);
      }
      r.verify_seconds.push_back(median(t));
      if (k == std::min(8, verify_max)) r.verify_launches = pass_launches(*model, k);
    }
  }

  // Drafted decode of the same prompt, one run per set of drafters; T_v(m) is measured by the first
  // and shared, StairCut starts fresh for each.
  std::vector<double> verify_costs;
  for (const auto& set : draft_sets) {
    DraftOptions o = draft_set(draft_base, set, a);
    if (o.verify_costs.empty()) o.verify_costs = verify_costs;
    r.drafting.push_back(bench_drafting(*model, reg, o, prompt, plain, g));
    verify_costs = r.drafting.back().verify_costs;
    std::fprintf(stderr, "drafted decode (%s): %.2f tok/s, %.2f tokens per step\n", r.drafting.back().drafters.c_str(),
                 r.drafting.back().drafted_tps(), r.drafting.back().metrics.tokens_per_step());
  }

  // Several streams at once, through the server's batched step.
  if (!stream_counts.empty())
    r.concurrent = bench_concurrent(*model, stream_counts, r.prompt_tokens, r.decode_tokens, p.context,
                                    int(r.prefill_chunk), seed,
                                    a.flag("profile-layers") ? int(a.integer("profile-steps", 32)) : 0);

  // Prefill, shortest first; a size whose time, extrapolated from the last one, would pass the budget
  // is skipped.
  {
    auto warm = model->new_sequence(64);
    std::vector<float> logits;
    model->forward(*warm, random_tokens(std::min<int64_t>(64, sizes.front())), ForwardMode::Prefill, logits, false);
    double rate = 0;
    for (int64_t n : sizes) {
      Prefill pf;
      pf.tokens = n;
      if (rate > 0 && double(n) / rate > budget) {
        char why[96];
        std::snprintf(why, sizeof why, "about %.0f s at %.0f tok/s, over the %.0f s budget", double(n) / rate, rate, budget);
        pf.skipped = why;
      } else {
        // The prompt alone, in the chunks `tandem serve` prefills long prompts in.
        GenerateOptions pg;
        pg.context = n;
        pg.max_tokens = 0;
        pg.prefill_chunk = int(r.prefill_chunk);
        pf.seconds = generate(*model, random_tokens(n), pg).prefill_seconds;
        rate = double(n) / pf.seconds;
        std::fprintf(stderr, "prefill %lld: %.0f tok/s\n", (long long)n, rate);
      }
      r.prefill.push_back(pf);
    }
  }

  // Where decode time goes, when it is far from the roofline or when asked.
  if (!a.flag("no-profile") && (a.flag("profile-layers") || (r.fraction() > 0 && r.fraction() < 0.5))) {
    r.profile_steps = int(a.integer("profile-steps", 32));
    check(r.profile_steps >= 1, "tandem bench: --profile-steps must be at least 1");
    r.profile = profile_layers(*model, prompt, p.context, r.profile_steps, r.bandwidth);
  }
  r.peak_memory = be.peak_memory_bytes();

  print_table(r);
  if (a.has("json")) write_json(r, a.str("json"));
  return 0;
}

}  // namespace tandem::cli
