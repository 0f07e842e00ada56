// `tandem bench --concurrent`: see bench_concurrent.h.
#include "bench_concurrent.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli.h"
#include "tandem/error.h"
#include "tandem/generate.h"
#include "tandem/model.h"
#include "tandem/backend.h"
#include "tandem/model_config.h"

namespace tandem::cli {
namespace {

using clock_type = std::chrono::steady_clock;

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());  // the lowest id on ties
}

struct Streams {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;  // each stream's greedy tokens, the prefill's first
};

void step(Model& model, Streams& s) {
  const size_t S = s.seqs.size();
  std::vector<Model::BatchPass> passes(S);
  for (size_t i = 0; i < S; ++i) passes[i] = {s.seqs[i].get(), {s.tokens[i].back()}, false, &s.logits[i]};
  model.forward_batch(passes);
  for (size_t i = 0; i < S; ++i) {
    model.commit(*s.seqs[i], 1);
    s.tokens[i].push_back(argmax(s.logits[i]));
  }
}

// `steps` more batched steps with a synchronize after the embedding, every layer and the head (the
// Model's forward observer; such passes run eagerly): ms per step by layer kind.
std::map<std::string, double> profile(Model& model, Streams& s, int steps) {
  const ModelDesc& d = model.desc();
  Backend& be = model.backend();
  const int n = int(d.layers.size());
  std::map<std::string, double> ms;
  auto kind = [&](int stage) -> std::string {
    return stage < 0 ? "embedding" : stage >= n ? "head" : layer_kind_name(d.layers[size_t(stage)].kind);
  };
  clock_type::time_point last;
  model.set_forward_observer([&](int stage, const Tensor&) {
    be.synchronize();
    const auto now = clock_type::now();
    ms[kind(stage)] += std::chrono::duration<double, std::milli>(now - last).count() / steps;
    last = now;
  });
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    be.synchronize();
    const auto t0 = last = clock_type::now();
    step(model, s);
    total += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count() / steps;
  }
  model.set_forward_observer(nullptr);
  double staged = 0;
  for (const auto& [k, v] : ms) staged += v;
  ms["logits+host"] = total - staged;
  return ms;
}

// Prefills every prompt, then runs warm + steps batched steps; returns the timed steps' seconds.
double run(Model& model, const std::vector<std::vector<int32_t>>& prompts, int warm, int steps, int64_t context,
           int prefill_chunk, Streams& s, int* forwards) {
  const size_t S = prompts.size();
  s.seqs.clear(), s.logits.assign(S, {}), s.tokens.assign(S, {});
  for (size_t i = 0; i < S; ++i) {
    s.seqs.push_back(model.new_sequence(context));
    prefill(model, *s.seqs[i], prompts[i], prefill_chunk, s.logits[i]);
    s.tokens[i].push_back(argmax(s.logits[i]));
  }
  double seconds = 0;
  for (int step = 0; step < warm + steps; ++step) {
    const int64_t p0 = model.passes();
    const auto t0 = clock_type::now();
    tandem::cli::step(model, s);
    if (step >= warm) {
      seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
      if (forwards) *forwards += int(model.passes() - p0);
    }
  }
  return seconds;
}

}  // namespace

std::vector<int> parse_stream_counts(const std::string& list) {
  std::vector<int> out;
  for (int64_t v : positive_list(list, "tandem bench: --concurrent", "stream counts")) {
    check(v <= Model::batch_max_rows, "tandem bench: --concurrent counts must be in [1, ", Model::batch_max_rows,
          "] (one row each in a pass of at most that many rows), found ", v);
    check(out.empty() || v > out.back(), "tandem bench: --concurrent counts must be ascending without repeats, found ",
          list);
    out.push_back(int(v));
  }
  check(!out.empty(), "tandem bench: --concurrent needs at least one stream count");
  return out;
}

std::vector<ConcurrentRun> bench_concurrent(Model& model, const std::vector<int>& counts, int prompt_tokens, int steps,
                                            int64_t context, int prefill_chunk, uint64_t seed, int profile_steps) {
  constexpr int kWarm = 2;  // op by op, then recorded: graphs replay from the third step
  check(prompt_tokens + kWarm + steps + profile_steps + 1 <= context, "tandem bench --concurrent: ", prompt_tokens,
        " prompt tokens + ", kWarm + steps + profile_steps + 1, " steps exceed --context ", context);
  const int64_t vocab = model.desc().vocab;
  Rng rng(seed + 17);
  std::vector<std::vector<int32_t>> prompts(size_t(counts.back()));
  for (auto& p : prompts) {
    p.resize(size_t(prompt_tokens));
    for (auto& t : p) t = int32_t(rng.next() % uint64_t(vocab));
  }
  // Each prompt alone: the tokens every batched run must reproduce, and one stream's speed.
  std::vector<std::vector<int32_t>> solo(prompts.size());
  double solo_seconds = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Streams s;
    const double sec = run(model, {prompts[i]}, kWarm, steps, context, prefill_chunk, s, nullptr);
    if (i == 0) solo_seconds = sec;
    solo[i] = s.tokens[0];
  }
  std::vector<ConcurrentRun> runs;
  for (int S : counts) {
    ConcurrentRun r;
    r.streams = S, r.steps = steps;
    r.solo_tps = solo_seconds > 0 ? steps / solo_seconds : 0;
    Streams s;
    r.seconds = run(model, {prompts.begin(), prompts.begin() + S}, kWarm, steps, context, prefill_chunk, s,
                    &r.forwards);
    for (int i = 0; i < S; ++i) {
      const auto& a = s.tokens[size_t(i)];
      const auto& b = solo[size_t(i)];
      for (size_t t = 0; t < a.size(); ++t)
        check(a[t] == b[t], "tandem bench --concurrent: stream ", i, " of ", S, " differs from its solo run at token ",
              t, " (", a[t], " vs ", b[t], "): batched decoding is not batch-invariant here");
    }
    std::fprintf(stderr, "concurrent %d: %.2f tok/s in all (%.2f×one stream)\n", S, r.aggregate_tps(),
                 r.solo_tps > 0 ? r.aggregate_tps() / r.solo_tps : 0.0);
    if (profile_steps > 0) {
      r.profile_steps = profile_steps;
      r.ms_per_step = profile(model, s, profile_steps);
    }
    runs.push_back(r);
  }
  return runs;
}

void print_concurrent(const std::vector<ConcurrentRun>& runs) {
  if (runs.empty()) return;
  std::printf("  concurrent streams     (one forward_batch a step; every stream's tokens = its solo run's)\n");
  for (const auto& r : runs)
    std::printf("    %2d streams           %9.2f tok/s in all, %8.2f per stream, %.2f× one stream, %.2f forwards a step\n",
                r.streams, r.aggregate_tps(), r.aggregate_tps() / r.streams,
                r.solo_tps > 0 ? r.aggregate_tps() / r.solo_tps : 0.0, r.steps ? double(r.forwards) / r.steps : 0.0);
  for (const auto& r : runs) {
    if (r.ms_per_step.empty()) continue;
    std::printf("    %2d streams, ms a step by layer kind (%d steps, synchronized after every layer):", r.streams,
                r.profile_steps);
    for (const auto& [k, v] : r.ms_per_step) std::printf(" %s %.3f;", k.c_str(), v);
    std::printf("\n");
  }
}

void write_concurrent(rapidjson::PrettyWriter<rapidjson::StringBuffer>& w, const std::vector<ConcurrentRun>& runs) {
  w.Key("concurrent");
  w.StartArray();
  for (const auto& r : runs) {
    w.StartObject();
    w.Key("streams"), w.Int(r.streams);
    w.Key("steps"), w.Int(r.steps);
    w.Key("seconds"), w.Double(r.seconds);
    w.Key("aggregate_tps"), w.Double(r.aggregate_tps());
    w.Key("solo_tps"), w.Double(r.solo_tps);
    w.Key("forwards"), w.Int(r.forwards);
    if (!r.ms_per_step.empty()) {
      w.Key("profile_steps"), w.Int(r.profile_steps);
      w.Key("ms_per_step");
      w.StartObject();
      for (const auto& [k, v] : r.ms_per_step) w.Key(k.c_str()), w.Double(v);
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace tandem::cli
