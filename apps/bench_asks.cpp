// The §6 protocol: render each ask through the model's chat template (thinking off), then P D P D …
// runs of one request each, timed from the first to the last generated token.
#include "bench_asks.h"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "bench_draft.h"
#include "tandem/generate.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "tandem/text/text_codec.h"

namespace tandem::cli {
namespace {

namespace rj = rapidjson;

struct Spread {
  std::vector<double> v;
  double mean() const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
  }
  double half_range() const {
    return v.empty() ? 0 : (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / 2;
  }
};

struct AskResult {
  std::string name;
  size_t prompt_tokens = 0;
  Spread plain, drafted;  // decode tok/s per run
  DraftMetrics metrics;   // summed over the drafted runs
};

// The chat request of an ask: its messages and `chat_template_kwargs: {enable_thinking: false}`.
std::vector<int32_t> ask_tokens(const TextCodec& codec, const Ask& ask) {
  rj::Document d(rj::kObjectType);
  auto& al = d.GetAllocator();
  rj::Value messages(rj::kArrayType);
  auto message = [&](const char* role, const std::string& content) {
    rj::Value m(rj::kObjectType);
    m.AddMember("role", rj::StringRef(role), al);
    m.AddMember("content", rj::Value(content.c_str(), rj::SizeType(content.size()), al), al);
    messages.PushBack(m, al);
  };
  if (*ask.system) message("system", ask.system);
  message("user", ask.user);
  d.AddMember("messages", messages, al);
  rj::Value kwargs(rj::kObjectType);
  kwargs.AddMember("enable_thinking", false, al);
  d.AddMember("chat_template_kwargs", kwargs, al);
  return codec.encode_prompt(codec.render_chat(d, true));
}

// Decode tok/s as spec/speculation.md §6.3: (completion tokens − 1) / (last token − first token);
// generate() times from the end of the prefill, which includes drawing the first token.
double decode_tps(const GenerateResult& r) {
  return r.decode_seconds > 0 && r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_seconds : 0;
}

void write_report(const AsksOptions& o, const std::string& drafters, const std::vector<double>& costs,
                  const std::vector<AskResult>& results) {
  rj::StringBuffer sb;
  rj::PrettyWriter<rj::StringBuffer> w(sb);
  auto str = [&](const char* k, const std::string& v) { w.Key(k), w.String(v.c_str()); };
  auto spread = [&](const char* k, const Spread& s) {
    w.Key(k), w.StartObject();
    w.Key("mean"), w.Double(s.mean());
    w.Key("half_range"), w.Double(s.half_range());
    w.Key("runs"), w.StartArray();
    for (double x : s.v) w.Double(x);
    w.EndArray();
    w.EndObject();
  };
  auto array = [&](const char* k, const std::vector<int64_t>& v) {
    w.Key(k), w.StartArray();
    for (int64_t x : v) w.Int64(x);
    w.EndArray();
  };
  w.StartObject();
  str("command", o.command);
  str("date", o.date);
  str("commit", o.commit);
  str("model", o.model);
  str("drafters", drafters);
  w.Key("tokens"), w.Int(o.tokens);
  w.Key("runs"), w.Int(o.runs);
  w.Key("context"), w.Int64(o.context);
  w.Key("verify_seconds"), w.StartArray();
  for (double t : costs) w.Double(t);
  w.EndArray();
  w.Key("asks"), w.StartArray();
  for (const AskResult& a : results) {
    w.StartObject();
    str("ask", a.name);
    w.Key("prompt_tokens"), w.Uint64(a.prompt_tokens);
    spread("plain_tokens_per_s", a.plain);
    spread("drafted_tokens_per_s", a.drafted);
    w.Key("output_equal"), w.Bool(true);
    w.Key("tokens_per_step"), w.Double(a.metrics.tokens_per_step());
    w.Key("acceptance"), w.Double(a.metrics.acceptance());
    w.Key("steps"), w.Int64(a.metrics.steps);
    w.Key("plain_steps"), w.Int64(a.metrics.plain_steps);
    array("chosen_k", a.metrics.k_histogram);
    array("tried_at_position", a.metrics.tried_at);
    array("accepted_at_position", a.metrics.accepted_at);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::ofstream f(o.json, std::ios::trunc);
  f << sb.GetString() << "\n";
  f.close();
  check(bool(f), "tandem bench: cannot write '", o.json, "'");
}

}  // namespace

void run_asks(Model& model, PluginRegistry& registry, const TextCodec& codec, const AsksOptions& o) {
  check(codec.missing_tokenizer().empty() && codec.missing_chat_template().empty(),
        "tandem bench --asks needs the model's tokenizer and chat template; missing: ",
        codec.missing_tokenizer().empty() ? codec.missing_chat_template() : codec.missing_tokenizer());
  check(!o.draft.drafters.empty(), "tandem bench --asks needs drafters: --draft NAME[,NAME…] or the profile's draft:");
  check(o.tokens >= 2 && o.runs >= 1, "tandem bench: --asks-tokens must be at least 2 and --asks-runs at least 1");
  std::string drafters;
  for (const auto& n : o.draft.drafters) drafters += (drafters.empty() ? "" : ",") + n;

  GenerateOptions g;  // greedy, thinking off (in the prompt), EOS ignored: every run yields o.tokens
  g.max_tokens = o.tokens;
  g.context = o.context;
  g.stop_at_eos = false;
  DraftOptions draft = o.draft;  // T_v(m) measured by the first drafted run, then shared (StairCut starts fresh each run)
  auto truth = std::make_shared<std::vector<int32_t>>();
  std::vector<AskResult> results;
  for (const Ask& ask : bench_asks()) {
    AskResult a;
    a.name = ask.name;
    const std::vector<int32_t> prompt = ask_tokens(codec, ask);
    a.prompt_tokens = prompt.size();
    check(int64_t(prompt.size()) + o.tokens <= o.context, "tandem bench --asks: ask '", ask.name, "' (", prompt.size(),
          " prompt tokens) + ", o.tokens, " tokens exceed --context ", o.context);
    std::vector<int32_t> reference;
    for (int run = 0; run < o.runs; ++run) {
      GenerateResult plain = generate(model, prompt, g);
      a.plain.v.push_back(decode_tps(plain));
      if (run == 0) {
        reference = plain.tokens;
        truth->assign(prompt.begin(), prompt.end());
        truth->insert(truth->end(), reference.begin(), reference.end());
      } else {
        check_same_tokens(reference, plain.tokens, std::string("ask '") + ask.name + "', plain run " + std::to_string(run + 1));
      }
      Drafting drafting(model, drafter_factories(draft.drafters, registry, model.backend().device(), truth), draft);
      if (draft.verify_costs.empty()) draft.verify_costs = drafting.staircut().costs().table();
      DraftMetrics m;
      GenerateResult drafted = drafting.generate(prompt, g, {}, &m);
      check_same_tokens(reference, drafted.tokens,
                        std::string("ask '") + ask.name + "', drafted run " + std::to_string(run + 1) + " (" + drafters + ")");
      a.drafted.v.push_back(decode_tps(drafted));
      a.metrics.add(m);
      std::fprintf(stderr, "%s run %d: plain %.2f tok/s, drafted %.2f tok/s, %.2f tokens per step\n", ask.name, run + 1,
                   a.plain.v.back(), a.drafted.v.back(), m.tokens_per_step());
    }
    results.push_back(std::move(a));
  }

  std::printf("tandem bench --asks  %s  commit %s  %s\n", o.model.c_str(), o.commit.c_str(), o.date.c_str());
  std::printf("  %d greedy tokens per run (EOS ignored), thinking off, %d plain and %d drafted runs per ask, "
              "alternating; drafters %s\n",
              o.tokens, o.runs, o.runs, drafters.c_str());
  std::printf("  %-6s %7s %18s %18s %7s %9s %8s\n", "ask", "prompt", "plain tok/s", "drafted tok/s", "ratio", "tok/step",
              "accepted");
  double plain_mean = 0;
  for (const AskResult& a : results) {
    plain_mean += a.plain.mean() / double(results.size());
    std::printf("  %-6s %7zu %10.2f ± %-5.2f %10.2f ± %-5.2f %6.2fx %9.2f %7.1f%%\n", a.name.c_str(), a.prompt_tokens,
                a.plain.mean(), a.plain.half_range(), a.drafted.mean(), a.drafted.half_range(),
                a.plain.mean() > 0 ? a.drafted.mean() / a.plain.mean() : 0.0, a.metrics.tokens_per_step(),
                100 * a.metrics.acceptance());
  }
  std::printf("  plain (mean over the asks) %.2f tok/s; every drafted output equals its plain output\n", plain_mean);
  std::printf("  T_v(m)/T_v(1):");
  for (size_t i = 0; i < draft.verify_costs.size() && i < 16; ++i)
    std::printf(" %zu:%.2f", i + 1, draft.verify_costs[i] / draft.verify_costs[0]);
  std::printf("\n");
  if (!o.json.empty()) write_report(o, drafters, draft.verify_costs, results);
}

}  // namespace tandem::cli
