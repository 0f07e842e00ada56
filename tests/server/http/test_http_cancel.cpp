// A client that leaves frees its slot within one engine step, wherever its request was: queued,
// mid-prefill (a long prompt read in many chunks) or mid-decode, streamed or not. The engine's steps
// are paced and counted through SchedulerOptions::after_step, so "one step" is measured in steps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "counting_backend.h"
#include "server_fixture.h"
#include "test_util.h"

namespace tandem::test {
namespace {

using std::chrono::milliseconds;
constexpr auto kStep = milliseconds(30);  // each engine step sleeps this long after its pass
const std::string kLabel = "{model_name=\"latent\"}";

struct PacedServer {
  std::shared_ptr<std::atomic<int64_t>> steps = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<server::HttpServer> srv;
  uint16_t port = 0;
  std::string metrics() const { return http_request(port, "GET", "/metrics").body; }
  double gauge(const std::string& name) const { return metric(metrics(), name + kLabel); }
};

// One slot (or `slots`), 16-token prefill chunks, the prefix cache off (so nothing outlives a
// request), every step counted and paced.
std::unique_ptr<PacedServer> paced_server(int slots = 1) {
  auto p = std::make_unique<PacedServer>();
  auto o = tiny_options(slots);
  o.scheduler.prefill_chunk = 16;
  o.scheduler.prefix_cache.bytes = 0;
  o.scheduler.after_step = [steps = p->steps] {
    ++*steps;
    std::this_thread::sleep_for(kStep);
  };
  p->srv = start_server(o);
  p->port = p->srv->port();
  wait_ready(p->port);
  return p;
}

// Polls every millisecond until `done` (false after `limit`: the limit only keeps a broken server
// from hanging the test).
bool poll_until(const std::function<bool()>& done, milliseconds limit = milliseconds(20000)) {
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(milliseconds(1)))
    if (done()) return true;
  return done();
}

// A prompt of n token ids, different from the fixture's.
std::vector<int32_t> long_prompt(int n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = int32_t(1 + (i * 37) % 250);
  return p;
}

std::string cancelled_series(const char* phase) {
  return std::string("tandem:requests_cancelled_total{model_name=\"latent\",phase=\"") + phase + "\"}";
}

// Slot 0's state in /slots.
std::string slot_state(uint16_t port, int64_t* n_past = nullptr) {
  auto slots = parse_json(http_request(port, "GET", "/slots", "", auth()).body);
  if (n_past) *n_past = slots[0]["n_past"].GetInt64();
  return slots[0]["state"].GetString();
}

// After the client of a request left at step `s0`: its cancellation is counted in `phase` and
// the engine reached `freed` within one step of the close, plus two for the io thread to see it on
// a loaded machine. (The 100 ms socket poll alone may take up to four steps; the exact one-step
// rule is tested on the scheduler itself, tests/schedulers/slots/test_slot_scheduler.cpp.)
void expect_freed_within_a_step(PacedServer& p, const std::function<bool()>& freed, int64_t s0, const char* phase,
                                double cancelled_before) {
  ASSERT_TRUE(poll_until(freed)) << p.metrics();
  const int64_t took = *p.steps - s0;
  EXPECT_LE(took, 3) << "steps between the close and the free";
  EXPECT_EQ(metric(p.metrics(), cancelled_series(phase)), cancelled_before + 1) << p.metrics();
}

// Nothing held, and a fresh request gets the reference answer.
void expect_idle_and_serving(PacedServer& p) {
  ASSERT_TRUE(poll_until([&] { return p.gauge("tandem:num_requests_running") == 0; })) << p.metrics();
  EXPECT_EQ(p.gauge("tandem:num_requests_waiting"), 0);
  EXPECT_EQ(p.gauge("tandem:sequence_bytes"), 0);
  EXPECT_EQ(slot_state(p.port), "idle");
  auto r = http_request(p.port, "POST", "/v1/completions", completion_body(fixture_prompt(), 4), auth());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(int_array(parse_json(r.body)["choices"][0]["tokens"]), reference_tokens(fixture_prompt(), 4));
}

const char* kStreamed = R"(,"stream":true,"ignore_eos":true)";
const char* kPlain = R"(,"ignore_eos":true)";

TEST(HttpCancel, QueuedClientLeavingIsDroppedBeforeItRuns) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    auto p = paced_server(1);
    // The slot is busy with a long generation; the second request waits behind it.
    OpenRequest busy(p->port, "/v1/completions", completion_body(fixture_prompt(), 900, kStreamed), auth());
    ASSERT_TRUE(busy.read_events(1));
    OpenRequest queued(p->port, "/v1/completions", completion_body(fixture_prompt(), 900, stream ? kStreamed : kPlain),
                       auth());
    ASSERT_TRUE(poll_until([&] { return p->gauge("tandem:num_requests_waiting") == 1; })) << p->metrics();
    const double c0 = metric(p->metrics(), cancelled_series("queued"));
    const int64_t s0 = *p->steps;
    queued.close();
    expect_freed_within_a_step(*p, [&] { return p->gauge("tandem:num_requests_waiting") == 0; }, s0, "queued", c0);
    EXPECT_EQ(p->gauge("tandem:num_requests_running"), 1) << "the running request goes on";
    busy.close();
    expect_idle_and_serving(*p);
  }
}

TEST(HttpCancel, ClientLeavingMidPrefillFreesTheSlotBeforeTheNextChunk) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    auto p = paced_server(1);
    // 960 tokens in 16-token chunks: 60 paced passes, about 2 s of prefill.
    OpenRequest r(p->port, "/v1/completions", completion_body(long_prompt(960), 8, stream ? kStreamed : kPlain), auth());
    int64_t n_past = 0;
    ASSERT_TRUE(poll_until([&] { return slot_state(p->port, &n_past) == "prefill" && n_past >= 32; }));
    const double c0 = metric(p->metrics(), cancelled_series("prefill"));
    const int64_t s0 = *p->steps;
    r.close();
    expect_freed_within_a_step(*p, [&] { return p->gauge("tandem:num_requests_running") == 0; }, s0, "prefill", c0);
    slot_state(p->port, &n_past);
    EXPECT_EQ(n_past, 0);
    expect_idle_and_serving(*p);
    const std::string m = p->metrics();
    EXPECT_LT(metric(m, "tandem:prompt_tokens_total" + kLabel), 960 + fixture_prompt().size()) << "the prefill ran on";
  }
}

TEST(HttpCancel, ClientLeavingMidDecodeFreesTheSlotAtTheNextStep) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    auto p = paced_server(1);
    OpenRequest r(p->port, "/v1/completions", completion_body(fixture_prompt(), 900, stream ? kStreamed : kPlain),
                  auth());
    if (stream) ASSERT_TRUE(r.read_events(3));
    ASSERT_TRUE(poll_until([&] { return slot_state(p->port) == "decode"; }));
    const double c0 = metric(p->metrics(), cancelled_series("decode"));
    const int64_t s0 = *p->steps;
    r.close();
    expect_freed_within_a_step(*p, [&] { return p->gauge("tandem:num_requests_running") == 0; }, s0, "decode", c0);
    expect_idle_and_serving(*p);
    EXPECT_LT(metric(p->metrics(), "tandem:generation_tokens_total" + kLabel), 900) << "the decode ran on";
  }
}

// 64 clients on 4 slots, half of them leaving: 16 mid-stream, 8 mid-prefill that watch their own
// slot in /slots (streamed, so the x-request-id header names it), 8 with long unstreamed prompts
// that leave after a while (queued or prefilling). Every answer that was waited for is the
// reference, every leaver is counted as cancelled, and afterwards nothing is held: every slot idle,
// the queue empty, no sequence bytes, and a fresh request is served at once.
TEST(HttpCancel, SixtyFourClientsHalfLeavingLeaveNothingBehind) {
  auto o = tiny_options(4);
  o.scheduler.prefill_chunk = 16;
  o.scheduler.prefix_cache.bytes = 0;  // nothing is meant to outlive a request
  o.scheduler.after_step = [] { std::this_thread::sleep_for(milliseconds(1)); };
  // Every buffer the model allocates is counted, so "back to the baseline" is checked beyond the
  // server's own accounting.
  auto backend = std::make_shared<CountingBackend>(cpu_backend());
  auto srv = start_server(o, nullptr, {}, backend);
  const uint16_t port = srv->port();
  wait_ready(port);
  // The baseline after one long and one short request: the model's scratch has grown to a full
  // prefill chunk, which it keeps.
  ASSERT_EQ(http_request(port, "POST", "/v1/completions", completion_body(long_prompt(100), 4), auth()).status, 200);
  ASSERT_EQ(http_request(port, "POST", "/v1/completions", completion_body(fixture_prompt(), 4), auth()).status, 200);
  // … and after four at once: the slots then decode in one batched pass of four rows, whose logits
  // scratch ([4, vocab]) the model keeps as well.
  {
    std::vector<std::thread> warm;
    for (int i = 0; i < 4; ++i)
      warm.emplace_back([&] {
        EXPECT_EQ(http_request(port, "POST", "/v1/completions", completion_body(fixture_prompt(), 24), auth()).status,
                  200);
      });
    for (auto& t : warm) t.join();
  }
  const size_t live0 = backend->counts->live;
  const std::string m0 = http_request(port, "GET", "/metrics").body;
  ASSERT_EQ(metric(m0, "tandem:sequence_bytes" + kLabel), 0) << m0;

  constexpr int kClients = 64;
  enum Kind { plain, streamed, leaves_stream, leaves_prefill, leaves_unstreamed };
  auto kind_of = [](int i) {
    switch (i % 8) {
      case 2: case 6: return leaves_stream;
      case 3: return leaves_prefill;
      case 7: return leaves_unstreamed;
      default: return i % 2 ? streamed : plain;
    }
  };
  std::vector<std::vector<int32_t>> prompts(kClients), want(kClients), got(kClients);
  std::vector<int> lengths(kClients), status(kClients, 0);
  for (int i = 0; i < kClients; ++i) {
    Kind k = kind_of(i);
    if (k == leaves_prefill || k == leaves_unstreamed) {
      prompts[i] = long_prompt(480 + 16 * (i % 5));  // 30 … 34 chunks
    } else {
      prompts[i] = fixture_prompt();
      prompts[i].push_back(int32_t(10 + i));
    }
    lengths[i] = k == plain || k == streamed ? 4 + (i % 5) * 3 : k == leaves_stream ? 800 : 400;  // within 1024
    if (k == plain || k == streamed) want[i] = reference_tokens(prompts[i], lengths[i]);
  }
  std::atomic<int> saw_prefill{0};
  std::atomic<int64_t> bytes_seen{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      switch (kind_of(i)) {
        case plain:
        case streamed:
          got[i] = completion_tokens(port, prompts[i], lengths[i], kind_of(i) == streamed, status[i]);
          break;
        case leaves_stream:
          read_then_disconnect(port, "/v1/completions", completion_body(prompts[i], lengths[i], kStreamed), auth(), 2);
          break;
        case leaves_prefill: {
          OpenRequest r(port, "/v1/completions", completion_body(prompts[i], lengths[i], kStreamed), auth());
          const std::string id = r.header("x-request-id");
          // Leave once this request's slot has read a chunk or two; if the window was missed, leave anyway.
          poll_until([&] {
            auto slots = parse_json(http_request(port, "GET", "/slots", "", auth()).body);
            for (const auto& sl : slots.GetArray()) {
              if (!sl["request_id"].IsString() || sl["request_id"].GetString() != id) continue;
              if (std::string(sl["state"].GetString()) != "prefill") return true;
              if (sl["n_past"].GetInt64() < 16) return false;
              ++saw_prefill;
              bytes_seen = std::max<int64_t>(bytes_seen, sl["bytes"].GetInt64());
              return true;
            }
            return false;  // still queued
          });
          r.close();
          break;
        }
        case leaves_unstreamed:
          send_then_disconnect(port, "/v1/completions", completion_body(prompts[i], lengths[i], kPlain), auth(),
                               20 + i);
          break;
      }
    });
  for (auto& t : threads) t.join();

  int answered = 0, left = 0;
  for (int i = 0; i < kClients; ++i) {
    if (kind_of(i) == plain || kind_of(i) == streamed) {
      EXPECT_EQ(status[i], 200) << "client " << i;
      EXPECT_EQ(got[i], want[i]) << "client " << i;
      ++answered;
    } else {
      ++left;
    }
  }
  ASSERT_EQ(left, kClients / 2);
  // Every leaver's slot comes back (the limit only keeps a broken server from hanging the test).
  std::string m1;
  ASSERT_TRUE(poll_until([&] {
    m1 = http_request(port, "GET", "/metrics").body;
    return metric(m1, "tandem:num_requests_running" + kLabel) == 0 && metric(m1, "tandem:num_requests_waiting" + kLabel) == 0;
  })) << m1;
  auto delta = [&](const std::string& series) { return metric(m1, series) - metric(m0, series); };
  const double queued = delta(cancelled_series("queued")), prefill = delta(cancelled_series("prefill")),
               decode = delta(cancelled_series("decode"));
  EXPECT_EQ(queued + prefill + decode, left) << m1;
  EXPECT_EQ(delta("tandem:request_success_total{model_name=\"latent\",finished_reason=\"abort\"}"), left);
  EXPECT_GE(decode, kClients / 4) << "the mid-stream leavers were decoding";
  EXPECT_GE(prefill, saw_prefill.load()) << "those seen mid-prefill left there";
  EXPECT_GE(saw_prefill.load(), 1) << "no leaver caught its own prefill";
  // Memory back to the baseline: the slots' sequences are gone, and the gauge did count them.
  EXPECT_GT(bytes_seen.load(), 0);
  EXPECT_EQ(metric(m1, "tandem:sequence_bytes" + kLabel), 0) << m1;
  EXPECT_EQ(metric(m1, "tandem:prefix_cache_bytes" + kLabel), 0) << m1;
  EXPECT_EQ(backend->counts->live, live0) << "bytes the backend still holds (baseline " << live0 << ")";
  EXPECT_GT(backend->counts->peak, live0 + size_t(bytes_seen.load())) << "the clients' sequences were on the backend";
  auto slots = parse_json(http_request(port, "GET", "/slots", "", auth()).body);
  for (const auto& sl : slots.GetArray()) {
    EXPECT_STREQ(sl["state"].GetString(), "idle");
    EXPECT_EQ(sl["bytes"].GetInt64(), 0);
  }
  // A fresh request is served promptly: it needs only its own steps (5 s is far above them).
  auto t0 = std::chrono::steady_clock::now();
  auto r = http_request(port, "POST", "/v1/completions", completion_body(fixture_prompt(), 8), auth());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(int_array(parse_json(r.body)["choices"][0]["tokens"]), reference_tokens(fixture_prompt(), 8));
  EXPECT_EQ(answered, kClients / 2);
}

}  // namespace
}  // namespace tandem::test
