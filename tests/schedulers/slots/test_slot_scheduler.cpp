// Cancellation in the SlotScheduler, counted in engine steps: a job cancelled between two steps
// (from the after_step hook, so the moment is exact) ends before the next pass runs, whether it was
// queued, prefilling a long prompt in chunks, or decoding; its slot's sequence memory goes back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "tandem/model.h"
#include "tandem/profile.h"
#include "tandem/slot_scheduler.h"
#include "tandem/text/text_codec.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

namespace tandem::test {
namespace {

LoadOptions tiny_load() {
  LoadOptions o;
  o.path = data_path("hf/latent");
  o.threads = 1;
  return o;
}

Model& model() {
  static std::unique_ptr<Model> m = Model::load(tiny_load(), registry());
  return *m;
}

std::shared_ptr<const TextCodec> codec() {
  Profile p;
  p.load = tiny_load();
  return make_text_codec(p, *open_checkpoint(p.load, registry()));
}

// The engine thread's record: steps run and each cancellation's phase and step.
struct Recorder : SchedulerEvents {
  std::atomic<int64_t> steps{0};
  std::mutex mu;
  std::vector<std::pair<std::string, int64_t>> cancels;  // phase, steps when the job ended
  void cancelled(const char* phase) override {
    std::lock_guard lk(mu);
    cancels.emplace_back(phase, steps.load());
  }
};

std::shared_ptr<Job> job(int prompt_tokens, int max_tokens) {
  auto j = std::make_shared<Job>();
  j->request_id = "job-" + std::to_string(prompt_tokens);
  for (int i = 0; i < prompt_tokens; ++i) j->prompt.push_back(int32_t(1 + (i * 37) % 250));
  j->max_tokens = max_tokens;
  j->params.ignore_eos = true;
  return j;
}

bool wait_done(Job& j) {
  for (auto until = Clock::now() + std::chrono::seconds(30); Clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(1)))
    if (j.take().done) return true;
  return false;
}

// Runs `jobs` on one slot (16-token prefill chunks, no prefix cache) and cancels `target` from the
// after_step hook once `when` says so.
struct CancelRun {
  Recorder events;
  int64_t cancelled_at = -1;
  int64_t max_sequence_bytes = 0;
  EngineGauges after;
};

void run(CancelRun& r, const std::vector<std::shared_ptr<Job>>& jobs, const std::shared_ptr<Job>& target,
         const std::function<bool(const SlotInfo&)>& when) {
  SchedulerOptions o;
  o.slots = 1;
  o.max_queue = 4;
  o.context = 1024;
  o.prefill_chunk = 16;
  o.prefix_cache.bytes = 0;
  SlotScheduler* sched = nullptr;
  o.after_step = [&] {
    ++r.events.steps;
    SlotInfo s = sched->slots()[0];
    r.max_sequence_bytes = std::max(r.max_sequence_bytes, s.bytes);
    if (r.cancelled_at < 0 && when(s)) {
      target->cancel(Job::Cancel::client_gone);
      r.cancelled_at = r.events.steps;
    }
  };
  SlotScheduler s(model(), codec(), r.events, o);
  sched = &s;
  ASSERT_EQ(s.submit(jobs), SlotScheduler::Admission::accepted);
  ASSERT_TRUE(wait_done(*target));
  for (const auto& j : jobs)
    if (j != target) j->cancel(Job::Cancel::server);
  for (const auto& j : jobs) ASSERT_TRUE(j->take().done || wait_done(*j));
  r.after = s.gauges();
}

// The target's cancellation: in `phase`, with no pass between the flag and the end.
void expect_cancelled_at_once(CancelRun& r, const char* phase) {
  ASSERT_GE(r.cancelled_at, 0) << "the cancel point was never reached";
  std::lock_guard lk(r.events.mu);
  ASSERT_FALSE(r.events.cancels.empty());
  EXPECT_EQ(r.events.cancels[0].first, phase);
  EXPECT_EQ(r.events.cancels[0].second, r.cancelled_at) << "a pass ran after the cancel";
  EXPECT_EQ(r.after.running, 0);
  EXPECT_EQ(r.after.waiting, 0);
  EXPECT_EQ(r.after.sequence_bytes, 0);
  EXPECT_GT(r.max_sequence_bytes, 0) << "the busy slot's sequence was not counted";
}

TEST(SlotSchedulerCancel, MidPrefillEndsBeforeTheNextChunk) {
  CancelRun r;
  auto j = job(960, 8);  // 60 chunks of 16
  run(r, {j}, j, [](const SlotInfo& s) { return std::string(s.state) == "prefill" && s.n_past >= 80; });
  expect_cancelled_at_once(r, "prefill");
  EXPECT_LT(r.cancelled_at, 60) << "cancelled after the prefill";
}

TEST(SlotSchedulerCancel, MidDecodeEndsBeforeTheNextStep) {
  CancelRun r;
  auto j = job(20, 500);
  run(r, {j}, j, [](const SlotInfo& s) { return std::string(s.state) == "decode" && s.n_past >= 30; });
  expect_cancelled_at_once(r, "decode");
}

TEST(SlotSchedulerCancel, QueuedJobIsDroppedBeforeItRuns) {
  CancelRun r;
  auto running = job(20, 500), queued = job(30, 500);
  run(r, {running, queued}, queued, [](const SlotInfo& s) { return std::string(s.state) == "decode"; });
  expect_cancelled_at_once(r, "queued");
  // The running job was not disturbed: it was still decoding when the test stopped it afterwards.
  std::lock_guard lk(r.events.mu);
  ASSERT_EQ(r.events.cancels.size(), 2u);
  EXPECT_EQ(r.events.cancels[1].first, "decode");
  EXPECT_GE(r.events.cancels[1].second, r.cancelled_at);
}

}  // namespace
}  // namespace tandem::test
