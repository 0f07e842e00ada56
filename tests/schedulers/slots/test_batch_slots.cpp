// The slot scheduler's batched steps: the decoding slots' passes run in one Model::forward_batch per
// step, and every request's tokens are exactly those of running it alone (tandem::generate), greedy
// and seeded sampling, plain and drafted (lookup, verify passes of 1 … 4 rows), with prompts of
// different lengths read in prefill chunks between the batched steps; long prompts are read
// oldest first, in whole chunks under the step's token budget, while the decoding slots go on; the n
// choices of one request read their prompt once. Built twice: for the CPU, and
// with TANDEM_BATCH_SLOTS_DEVICE="cuda" as test_batch_slots_cuda (label gpu; skips without a CUDA
// device, fails instead under TANDEM_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "gpu_required.h"
#include "tandem/generate.h"
#include "tandem/registry.h"
#include "tandem/slot_scheduler.h"
#include "tandem/text/text_codec.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

#ifndef TANDEM_BATCH_SLOTS_DEVICE
#define TANDEM_BATCH_SLOTS_DEVICE "cpu"
#endif

namespace tandem::test {
namespace {

// The tiny HF fixture (MEM*EM*E, vocab 256: short outputs repeat ids, which the lookup drafter needs).
Model& model() {
  static std::unique_ptr<Model> m = [] {
    LoadOptions o;
    o.path = data_path("hf/latent");
    o.device = TANDEM_BATCH_SLOTS_DEVICE;
    o.threads = 2;
    return Model::load(o, registry());
  }();
  return *m;
}

// Jobs here ask for tokens only (want_text = false): the codec is never asked for text.
class TokensOnly final : public TextCodec {
 public:
  std::string missing_tokenizer() const override { return "no tokenizer (token-only test codec)"; }
  std::string missing_chat_template() const override { return "no chat template (token-only test codec)"; }
  std::vector<int32_t> encode(const std::string&, bool, bool) const override { fail("TokensOnly: no encode"); }
  std::string token_bytes(int32_t) const override { return ""; }
  ChatPrompt render_chat(const rapidjson::Value&, bool) const override { fail("TokensOnly: no chat"); }
};

class NoEvents : public SchedulerEvents {};

// Counts what the drafted requests verified.
class DraftCount : public SchedulerEvents {
 public:
  void drafted(const DraftMetrics& r) override { drafted_tokens += r.drafted_tokens; }
  int64_t drafted_tokens = 0;  // read after the engine thread joined
};

constexpr int kMaxTokens = 16, kChunk = 4;
constexpr int64_t kContext = 256;

struct Case {
  const char* name;
  float temperature;
  bool drafted;
};

// Skips (or fails under TANDEM_REQUIRE_GPU=1) when the device's backend is not here.
class SlotsOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TANDEM_BATCH_SLOTS_DEVICE) == "cpu") return;
    std::string cause;
    try {
      registry().backend(TANDEM_BATCH_SLOTS_DEVICE);
      return;
    } catch (const std::exception& e) {
      cause = std::string("no ") + TANDEM_BATCH_SLOTS_DEVICE + " backend here: " + e.what();
    }
    for (const auto& s : registry().skipped()) cause += "; skipped module: " + s;
    TANDEM_GPU_UNAVAILABLE(cause);
  }
};

// Runs `jobs` (submitted together) to the end; their tokens, in order.
std::vector<std::vector<int32_t>> run_jobs(SlotScheduler& sched, const std::vector<std::shared_ptr<Job>>& jobs,
                                           std::vector<JobOutput>* last = nullptr) {
  std::vector<std::vector<int32_t>> got(jobs.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < jobs.size(); ++i) {
    for (;;) {
      JobOutput o = jobs[i]->take();
      got[i].insert(got[i].end(), o.tokens.begin(), o.tokens.end());
      if (o.done) {
        EXPECT_FALSE(o.error) << "request " << i << ": " << o.error->message;
        if (last) last->push_back(o);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "request " << i << " did not finish";
        return got;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return got;
}

std::shared_ptr<Job> make_job(const std::string& id, std::vector<int32_t> prompt, int max_tokens, SamplingParams s) {
  auto j = std::make_shared<Job>();
  j->request_id = id;
  j->prompt = std::move(prompt);
  j->max_tokens = max_tokens;
  j->params.sampling = s;
  j->params.ignore_eos = true;
  return j;
}

std::vector<int32_t> solo(const std::vector<int32_t>& prompt, int max_tokens, const SamplingParams& s) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.context = kContext;
  o.sampling = s;
  o.stop_at_eos = false;
  o.prefill_chunk = kChunk;
  return generate(model(), prompt, o).tokens;
}

std::vector<int32_t> random_prompt(std::mt19937_64& g, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(g() % uint64_t(model().desc().vocab)));
  return p;
}

class BatchSlots : public SlotsOnDevice, public ::testing::WithParamInterface<Case> {};

// Four requests at once; the first prefill step waits until all four are queued, so that from the
// third round on all four slots decode together.
TEST_P(BatchSlots, ConcurrentRequestsGiveTheirSoloTokensInOneForwardPerStep) {
  const Case c = GetParam();
  Model& m = model();
  const int V = m.desc().vocab;
  std::mt19937_64 g(3);
  std::vector<std::vector<int32_t>> prompts;
  for (auto [base, middle] : {std::pair{3, 2}, {4, 5}, {5, 8}, {3, 1}}) {
    // A passage, other tokens, the passage again: the lookup drafter proposes what followed it.
    std::vector<int32_t> passage, p;
    for (int i = 0; i < base; ++i) passage.push_back(int32_t(g() % uint64_t(V)));
    p = passage;
    for (int i = 0; i < middle; ++i) p.push_back(int32_t(g() % uint64_t(V)));
    p.insert(p.end(), passage.begin(), passage.end());
    prompts.push_back(p);
  }
  auto sampling = [&](size_t i) {
    SamplingParams s;
    s.temperature = c.temperature;
    s.seed = 1000 + i;
    return s;
  };
  // The references: each request alone (drafting is lossless, so plain decoding is the reference).
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(solo(prompts[i], kMaxTokens, sampling(i)));

  std::promise<void> all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  std::vector<int64_t> per_step;  // the model's passes in each step (engine thread, read after join)
  int64_t last = 0;
  SchedulerOptions so;
  so.slots = 4;
  so.context = kContext;
  so.prefill_chunk = kChunk;
  so.step_tokens = 8 * kChunk;  // every prompt's chunks in the first two steps: then all four decode together
  if (c.drafted) {
    so.draft.drafters = {"lookup"};
    // One-token matches too, so that the short runs here propose.
    so.draft.settings["lookup"] = SpeculatorSettings("test", "draft.lookup", {{"n_min", "1"}});
    so.draft.staircut.force_k = 3;
    so.draft.verify_costs.assign(size_t(so.draft.staircut.max_k) + 1, 1e-3);
  }
  so.after_step = [&] {
    queued.wait();
    per_step.push_back(m.passes() - last);
    last = m.passes();
  };
  DraftCount events;
  const int64_t start = m.passes();
  last = start;
  {
    SlotScheduler sched(m, std::make_shared<TokensOnly>(), events, so, &registry());
    std::vector<std::shared_ptr<Job>> jobs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      jobs.push_back(make_job("r" + std::to_string(i), prompts[i], kMaxTokens, sampling(i)));
      ASSERT_EQ(sched.submit(jobs.back()), SlotScheduler::Admission::accepted);
    }
    all_queued.set_value();
    std::vector<JobOutput> outs;
    const std::vector<std::vector<int32_t>> got = run_jobs(sched, jobs, &outs);
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (i < outs.size()) EXPECT_EQ(outs[i].finish_reason, "length") << "request " << i;
      EXPECT_EQ(got[i], want[i]) << "request " << i << " (prompt of " << prompts[i].size()
                                 << " tokens) differs from its solo run";
    }
  }  // joins the engine thread
  // Every step is one forward: a prefill chunk, or the batched passes of all decoding slots.
  for (size_t s = 0; s < per_step.size(); ++s) EXPECT_EQ(per_step[s], 1) << "step " << s;
  // Alone, the requests take Σ (prefill chunks + kMaxTokens − 1 decode passes) forwards; batched, the
  // prefill chunks (each its own step) and about kMaxTokens − 1 decode steps for all of them.
  int64_t chunks = 0, solo = 0;
  for (const auto& p : prompts) chunks += (int64_t(p.size()) + kChunk - 1) / kChunk;
  solo = chunks + int64_t(prompts.size()) * (kMaxTokens - 1);
  const int64_t batched = m.passes() - start;
  EXPECT_EQ(batched, int64_t(per_step.size()));
  if (!c.drafted) {
    EXPECT_LE(batched, chunks + (kMaxTokens - 1) + 4) << "solo runs would take " << solo;
  } else {
    EXPECT_LT(batched, solo);  // fewer forwards still: every step batches the slots (and drafts)
    EXPECT_GT(events.drafted_tokens, 0) << "the lookup drafter never drafted: the passes were all 1 row";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BatchSlots,
                         ::testing::Values(Case{"greedy", 0.0f, false}, Case{"seeded", 0.9f, false},
                                           Case{"greedy_drafted", 0.0f, true}, Case{"seeded_drafted", 0.9f, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(SlotsOnDevice, BatchRowsOutsideItsRangeIsAnError) {
  NoEvents events;
  for (int rows : {0, Model::batch_max_rows + 1}) {
    SchedulerOptions so;
    so.batch_rows = rows;
    try {
      SlotScheduler sched(model(), std::make_shared<TokensOnly>(), events, so);
      ADD_FAILURE() << "batch_rows " << rows << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("batch_rows must be in [1, 16], found " + std::to_string(rows)),
                std::string::npos)
          << e.what();
    }
  }
}

// step_tokens, and the prefill chunks a step holds beside one decode row.
struct Budget {
  const char* name;
  int step_tokens;
  int chunks;
};

class StepBudget : public SlotsOnDevice, public ::testing::WithParamInterface<Budget> {};

// Slot A decodes while B's and then C's long prompts are read: every step gives A its token and B
// (the older) `chunks` chunks; C starts only once B is in. Each request's tokens are its solo run's.
TEST_P(StepBudget, DecodingGoesOnWhileLongPromptsAreReadOldestFirst) {
  const Budget b = GetParam();
  Model& m = model();
  std::mt19937_64 g(11);
  const int kLong = 12 * kChunk, kA = 60;
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(g, kChunk), random_prompt(g, kLong),
                                                     random_prompt(g, kLong)};
  const std::vector<int> max_tokens = {kA, 4, 4};
  SamplingParams greedy;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(solo(prompts[i], max_tokens[i], greedy));

  struct Seen {
    int64_t a, b, c;
    bool b_prefill, c_prefill;
  };
  std::vector<Seen> seen;  // the slots after every step (engine thread, read after join)
  std::promise<void> all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  SchedulerOptions so;
  so.slots = 3;
  so.context = kContext;
  so.prefill_chunk = kChunk;
  so.step_tokens = b.step_tokens;
  so.prefix_cache.bytes = 0;
  SlotScheduler* sp = nullptr;
  so.after_step = [&] {
    queued.wait();
    auto in = sp->slots();
    auto prefill = [](const SlotInfo& i) { return std::string(i.state) == "prefill"; };
    seen.push_back({in[0].n_past, in[1].n_past, in[2].n_past, prefill(in[1]), prefill(in[2])});
  };
  NoEvents events;
  std::vector<std::vector<int32_t>> got;
  {
    SlotScheduler sched(m, std::make_shared<TokensOnly>(), events, so);
    sp = &sched;
    std::vector<std::shared_ptr<Job>> jobs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      jobs.push_back(make_job("r" + std::to_string(i), prompts[i], max_tokens[i], greedy));
      ASSERT_EQ(sched.submit(jobs.back()), SlotScheduler::Admission::accepted);
    }
    all_queued.set_value();
    got = run_jobs(sched, jobs);
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i << " differs from its solo run";

  // Rounds while B is read: between two of A's decode forwards, B's chunks only.
  int rounds = 0;
  int64_t a_during = 0, chunks = -1;  // -1: before A's first decode forward
  for (size_t k = 1; k < seen.size(); ++k) {
    const Seen &p = seen[k - 1], &c = seen[k];
    EXPECT_FALSE(c.b_prefill && c.c > 0) << "step " << k << ": C was read before B";
    if (c.a > p.a && p.a >= kChunk) {  // one of A's decode forwards
      if (p.b_prefill && p.b > 0 && chunks >= 0) {
        EXPECT_EQ(chunks, b.chunks) << "step " << k << ": chunks of B since A's last token";
        ++rounds;
      }
      if (p.b_prefill || p.c_prefill) ++a_during;
      chunks = 0;
    } else if (c.b > p.b && p.b_prefill && chunks >= 0) {
      ++chunks;
    }
  }
  EXPECT_GE(rounds, 12 / b.chunks - 2) << "B's prefill did not share its steps with A's decoding";
  // A's tokens kept coming through both long prefills.
  EXPECT_GE(a_during, 2 * (12 / b.chunks) - 3);
}

INSTANTIATE_TEST_SUITE_P(Budgets, StepBudget,
                         ::testing::Values(Budget{"one_chunk", 0, 1}, Budget{"three_chunks", 3 * kChunk + 1, 3}),
                         [](const auto& info) { return std::string(info.param.name); });

// The n choices of one request (one submit) read the prompt once, the first choice's prefill; each
// choice's tokens are those of a single request with its seed, with the choices side by side or
// queued behind one slot (they start from the kept state after the first choice ended).
TEST_F(SlotsOnDevice, ChoicesOfOneRequestReadThePromptOnce) {
  Model& m = model();
  std::mt19937_64 g(5);
  const std::vector<int32_t> prompt = random_prompt(g, 5 * kChunk);
  constexpr int kN = 3, kTokens = 8;
  auto sampling = [](int i) {
    SamplingParams s;
    s.temperature = 0.9f;
    s.seed = 41 + uint64_t(i);
    return s;
  };
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < kN; ++i) want.push_back(solo(prompt, kTokens, sampling(i)));
  for (int slots : {kN, 1}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    SchedulerOptions so;
    so.slots = slots;
    so.context = kContext;
    so.prefill_chunk = kChunk;
    so.prefix_cache.bytes = 0;  // the choices share without the prefix cache
    NoEvents events;
    std::vector<JobOutput> outs;
    std::vector<std::vector<int32_t>> got;
    const int64_t start = m.passes();
    {
      SlotScheduler sched(m, std::make_shared<TokensOnly>(), events, so);
      std::vector<std::shared_ptr<Job>> jobs;
      for (int i = 0; i < kN; ++i) jobs.push_back(make_job("n", prompt, kTokens, sampling(i)));
      ASSERT_EQ(sched.submit(jobs), SlotScheduler::Admission::accepted);
      got = run_jobs(sched, jobs, &outs);
      EXPECT_EQ(sched.gauges().sequence_bytes, 0);
    }
    const int64_t passes = m.passes() - start;
    for (int i = 0; i < kN; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << "choice " << i;
    ASSERT_EQ(outs.size(), size_t(kN));
    int64_t read = 0;
    for (int i = 0; i < kN; ++i) {
      EXPECT_EQ(outs[size_t(i)].usage.prompt_tokens, int64_t(prompt.size())) << "choice " << i;
      read += outs[size_t(i)].timings.prompt_n;
    }
    EXPECT_EQ(read, int64_t(prompt.size())) << "prompt tokens read over all choices";
    EXPECT_EQ(outs[0].timings.prompt_n, int64_t(prompt.size()));
    // 5 prefill chunks once, then kTokens − 1 decode steps: batched side by side, each its own in turn.
    const int64_t decode = slots == kN ? kTokens - 1 : kN * (kTokens - 1);
    EXPECT_EQ(passes, 5 + decode) << "reading the prompt " << kN << " times would take " << kN * 5 + decode;
  }
}

TEST_F(SlotsOnDevice, StepTokensBelowThePrefillChunkIsAnError) {
  NoEvents events;
  SchedulerOptions so;
  so.prefill_chunk = 8;
  so.step_tokens = 7;
  try {
    SlotScheduler sched(model(), std::make_shared<TokensOnly>(), events, so);
    ADD_FAILURE() << "step_tokens 7 with a prefill chunk of 8 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("step_tokens must be 0 (one prefill chunk a step) or at least the prefill "
                                         "chunk (8), found 7"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::test
