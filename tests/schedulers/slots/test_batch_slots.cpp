// The slot scheduler's batched steps: the decoding slots' passes run in one Model::forward_batch per
// step, and every request's tokens are exactly those of running it alone (tandem::generate), greedy
// and seeded sampling, plain and drafted (lookup, verify passes of 1 … 4 rows), with prompts of
// different lengths read in prefill chunks between the batched steps. Built twice: for the CPU, and
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
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions o;
    o.max_tokens = kMaxTokens;
    o.context = kContext;
    o.sampling = sampling(i);
    o.stop_at_eos = false;
    o.prefill_chunk = kChunk;
    want.push_back(generate(m, prompts[i], o).tokens);
  }

  std::promise<void> all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  std::vector<int64_t> per_step;  // the model's passes in each step (engine thread, read after join)
  int64_t last = 0;
  SchedulerOptions so;
  so.slots = 4;
  so.context = kContext;
  so.prefill_chunk = kChunk;
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
      auto j = std::make_shared<Job>();
      j->request_id = "r" + std::to_string(i);
      j->prompt = prompts[i];
      j->max_tokens = kMaxTokens;
      j->params.sampling = sampling(i);
      j->params.ignore_eos = true;
      ASSERT_EQ(sched.submit(j), SlotScheduler::Admission::accepted);
      jobs.push_back(j);
    }
    all_queued.set_value();
    std::vector<std::vector<int32_t>> got(jobs.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (size_t i = 0; i < jobs.size(); ++i) {
      for (;;) {
        JobOutput o = jobs[i]->take();
        got[i].insert(got[i].end(), o.tokens.begin(), o.tokens.end());
        if (o.done) {
          EXPECT_FALSE(o.error) << "request " << i << ": " << o.error->message;
          EXPECT_EQ(o.finish_reason, "length") << "request " << i;
          break;
        }
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "request " << i << " did not finish";
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
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

}  // namespace
}  // namespace tandem::test
