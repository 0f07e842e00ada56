// `n`, `logprobs`, `top_logprobs` and `echo` on the tiny fixture model: every reported logprob is the
// log-softmax of the model's own logits at that position (what `tandem logits` writes, within 1e-4),
// the shapes are OpenAI's (chat content[] entries, completions' parallel lists with dicts and
// offsets, streamed per choice index), seeded choices equal single requests with the derived seeds,
// drafting leaves the numbers unchanged, and every bad value is a 400 naming its field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "server_fixture.h"
#include "tandem/generate.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

namespace tandem::test {
namespace {

struct Srv {
  std::unique_ptr<server::HttpServer> srv;
  uint16_t port = 0;
};

Srv start(server::ServerOptions o, std::shared_ptr<const TextCodec> codec = nullptr) {
  Srv x;
  x.srv = start_server(std::move(o), std::move(codec));
  x.port = x.srv->port();
  wait_ready(x.port);
  return x;
}

// The plain server without a tokenizer (tokens show as "token_id:N"), and one with the byte codec.
Srv& plain() {
  static Srv s = start(tiny_options(2));
  return s;
}
Srv& bytes_server() {
  static Srv s = start(tiny_options(2), std::make_shared<ByteCodec>());
  return s;
}

// log_softmax of the model's logits of every position of `tokens` ([n][vocab]), as `tandem logits`
// computes them (one prefill pass, every position), in fp64.
std::vector<std::vector<double>> reference_logprobs(const std::vector<int32_t>& tokens) {
  static std::unique_ptr<Model> model = load_model(data_path("hf/latent"));
  auto seq = model->new_sequence(1024);
  std::vector<float> logits;
  model->forward(*seq, tokens, ForwardMode::Prefill, logits, true);
  const size_t V = size_t(model->desc().vocab);
  std::vector<std::vector<double>> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = logits.data() + i * V;
    double hi = -INFINITY, sum = 0;
    for (size_t t = 0; t < V; ++t) hi = std::max(hi, double(row[t]));
    for (size_t t = 0; t < V; ++t) sum += std::exp(double(row[t]) - hi);
    for (size_t t = 0; t < V; ++t) out[i].push_back(double(row[t]) - hi - std::log(sum));
  }
  return out;
}

int token_id(const std::string& piece) {
  EXPECT_EQ(piece.rfind("token_id:", 0), 0u) << piece;
  return std::stoi(piece.substr(9));
}

// completion_body() without its "temperature":0 (a second temperature key would not win).
std::string sampled_body(const std::vector<int32_t>& prompt, int max_tokens, const std::string& extra) {
  std::string b = completion_body(prompt, max_tokens, extra);
  return b.replace(b.find(",\"temperature\":0"), 16, "");
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_error(const HttpResult& r, const std::string& code, const std::string& param) {
  EXPECT_EQ(r.status, 400) << r.body;
  auto d = parse_json(r.body);
  ASSERT_TRUE(d.IsObject() && d.HasMember("error")) << r.body;
  EXPECT_EQ(std::string(d["error"]["code"].GetString()), code) << r.body;
  ASSERT_TRUE(d["error"]["param"].IsString()) << r.body;
  EXPECT_EQ(std::string(d["error"]["param"].GetString()), param) << r.body;
  EXPECT_NE(std::string(d["error"]["message"].GetString()).find(param), std::string::npos) << r.body;
}

// Checks a completions `logprobs` object against the reference: entry j is token seq[first + j],
// predicted by row first + j − 1 (entry 0 of an echo is null when first = 0); each dict holds the
// `top` most likely ids (and the taken one), with the reference's values.
void expect_completion_logprobs(const rapidjson::Value& lp, const std::vector<int32_t>& seq, size_t first, int top) {
  const auto ref = reference_logprobs(seq);
  const auto& toks = lp["tokens"];
  ASSERT_EQ(toks.Size(), seq.size() - first);
  ASSERT_EQ(lp["token_logprobs"].Size(), toks.Size());
  ASSERT_EQ(lp["top_logprobs"].Size(), toks.Size());
  ASSERT_EQ(lp["text_offset"].Size(), toks.Size());
  for (size_t j = 0; j < toks.Size(); ++j) {
    const size_t pos = first + j;
    EXPECT_EQ(token_id(toks[j].GetString()), seq[pos]) << j;
    EXPECT_EQ(lp["text_offset"][j].GetInt(), 0) << "no tokenizer: no text";
    if (pos == 0) {
      EXPECT_TRUE(lp["token_logprobs"][j].IsNull());
      EXPECT_TRUE(lp["top_logprobs"][j].IsNull());
      continue;
    }
    const auto& row = ref[pos - 1];
    EXPECT_NEAR(lp["token_logprobs"][j].GetDouble(), row[size_t(seq[pos])], 1e-4) << "position " << pos;
    const auto& dict = lp["top_logprobs"][j];
    ASSERT_TRUE(dict.IsObject());
    std::vector<double> sorted(row);
    std::sort(sorted.rbegin(), sorted.rend());
    bool has_taken = false;
    int members = 0;
    for (auto it = dict.MemberBegin(); it != dict.MemberEnd(); ++it, ++members) {
      int id = token_id(it->name.GetString());
      has_taken |= id == seq[pos];
      EXPECT_NEAR(it->value.GetDouble(), row[size_t(id)], 1e-4);
      if (id != seq[pos]) EXPECT_GE(row[size_t(id)], sorted[size_t(top - 1)] - 1e-9) << "not among the top " << top;
    }
    EXPECT_TRUE(has_taken);
    EXPECT_GE(members, std::max(top, 1));
    EXPECT_LE(members, top + 1);
  }
}

TEST(HttpLogprobs, CompletionLogprobsAreTheModelsLogSoftmax) {
  auto& s = plain();
  const auto& p = fixture_prompt();
  auto want = reference_tokens(p, 12);
  auto r = http_request(s.port, "POST", "/v1/completions", completion_body(p, 12, R"(,"logprobs":3)"), auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  const auto& c = d["choices"][0];
  EXPECT_EQ(int_array(c["tokens"]), want);
  expect_completion_logprobs(c["logprobs"], concat(p, want), p.size(), 3);
  // Greedy: each taken token is the most likely, and its logprob is the dict's largest value exactly
  // (lm-evaluation-harness's is_greedy test compares them with !=).
  for (rapidjson::SizeType j = 0; j < c["logprobs"]["tokens"].Size(); ++j) {
    double best = -INFINITY;
    for (auto& m : c["logprobs"]["top_logprobs"][j].GetObject()) best = std::max(best, m.value.GetDouble());
    EXPECT_EQ(c["logprobs"]["token_logprobs"][j].GetDouble(), best) << j;
  }
  // Without the field: "logprobs": null.
  auto n = parse_json(http_request(s.port, "POST", "/v1/completions", completion_body(p, 2), auth()).body);
  EXPECT_TRUE(n["choices"][0]["logprobs"].IsNull());
}

TEST(HttpLogprobs, EchoScoresThePrompt) {
  auto& s = plain();
  const auto& p = fixture_prompt();
  // lm-evaluation-harness's loglikelihood request: echo, logprobs 1, one generated token (as a list
  // holding one prompt of ids).
  std::string ids;
  for (size_t i = 0; i < p.size(); ++i) ids += (i ? "," : "") + std::to_string(p[i]);
  auto r = http_request(s.port, "POST", "/v1/completions",
                        R"({"prompt":[[)" + ids + R"(]],"max_tokens":1,"temperature":0,"logprobs":1,"echo":true,"seed":1234})",
                        auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  auto want = reference_tokens(p, 1);
  expect_completion_logprobs(d["choices"][0]["logprobs"], concat(p, want), 0, 1);
  // The prompt alone (max_tokens 0 with echo): its logprobs, nothing generated, finish_reason length.
  auto z = parse_json(http_request(s.port, "POST", "/v1/completions", completion_body(p, 0, R"(,"logprobs":0,"echo":true)"),
                                   auth())
                          .body);
  expect_completion_logprobs(z["choices"][0]["logprobs"], p, 0, 0);
  EXPECT_STREQ(z["choices"][0]["finish_reason"].GetString(), "length");
  EXPECT_EQ(z["usage"]["completion_tokens"].GetInt(), 0);
  // Streamed: the prompt's entries come first, the generated ones after; together the same lists.
  auto st = http_request(s.port, "POST", "/v1/completions",
                         completion_body(p, 4, R"(,"logprobs":2,"echo":true,"stream":true)"), auth());
  ASSERT_EQ(st.status, 200) << st.body;
  std::vector<int> toks;
  for (const auto& e : sse_events(st.body)) {
    if (e == "[DONE]") break;
    auto c = parse_json(e);
    const auto& lp = c["choices"][0]["logprobs"];
    if (lp.IsNull()) continue;
    for (auto& t : lp["tokens"].GetArray()) toks.push_back(token_id(t.GetString()));
  }
  auto seq = concat(p, reference_tokens(p, 4));
  EXPECT_EQ(std::vector<int32_t>(toks.begin(), toks.end()), seq);
}

TEST(HttpLogprobs, TextOffsetsAndBytePieces) {
  auto& s = bytes_server();
  // "h\xc3" then "\xa9" …: a partial UTF-8 character shows as bytes:\xNN; offsets count characters.
  auto r = http_request(s.port, "POST", "/v1/completions",
                        R"({"prompt":[104,195,169,33],"max_tokens":3,"temperature":0,"logprobs":0,"echo":true})", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  const auto& c = d["choices"][0];
  const std::string text = c["text"].GetString();
  EXPECT_EQ(text.rfind("h\xc3\xa9!", 0), 0u) << text;
  const auto& lp = c["logprobs"];
  EXPECT_STREQ(lp["tokens"][0].GetString(), "h");
  EXPECT_STREQ(lp["tokens"][1].GetString(), "bytes:\\xc3");
  EXPECT_STREQ(lp["tokens"][2].GetString(), "bytes:\\xa9");
  EXPECT_STREQ(lp["tokens"][3].GetString(), "!");
  const std::vector<int> offsets = {0, 1, 2, 2};
  for (size_t j = 0; j < offsets.size(); ++j) EXPECT_EQ(lp["text_offset"][rapidjson::SizeType(j)].GetInt(), offsets[j]) << j;
}

TEST(HttpLogprobs, ChatLogprobsShape) {
  std::string path = shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto tmpl = std::make_shared<const ChatTemplate>(ChatTemplate::from_file(path));
  auto s = start(tiny_options(1), std::make_shared<ByteCodec>(tmpl));
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false})";
  std::string prompt = parse_json(http_request(s.port, "POST", "/apply-template", "{" + msgs + "}", auth()).body)["prompt"].GetString();
  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  auto want = reference_tokens(ids, 10);
  const std::string body = "{" + msgs + R"(,"temperature":0,"max_tokens":10,"logprobs":true,"top_logprobs":4)";
  auto r = http_request(s.port, "POST", "/v1/chat/completions", body + "}", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  const auto& lp = d["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.IsObject()) << r.body;
  EXPECT_TRUE(lp["refusal"].IsNull());
  const auto& content = lp["content"];
  ASSERT_EQ(content.Size(), want.size());
  const auto ref = reference_logprobs(concat(ids, want));
  for (rapidjson::SizeType j = 0; j < content.Size(); ++j) {
    const auto& e = content[j];
    const auto& row = ref[ids.size() - 1 + j];
    ASSERT_EQ(e["bytes"].Size(), 1u);
    EXPECT_EQ(e["bytes"][0].GetInt(), want[j]);
    EXPECT_NEAR(e["logprob"].GetDouble(), row[size_t(want[j])], 1e-4);
    ASSERT_EQ(e["top_logprobs"].Size(), 4u);
    double prev = INFINITY;
    for (auto& t : e["top_logprobs"].GetArray()) {
      int id = t["bytes"][0].GetInt();
      EXPECT_NEAR(t["logprob"].GetDouble(), row[size_t(id)], 1e-4);
      EXPECT_LE(t["logprob"].GetDouble(), prev);
      prev = t["logprob"].GetDouble();
      EXPECT_TRUE(t["token"].IsString());
    }
    // Greedy: the taken token is the first alternative.
    EXPECT_EQ(e["top_logprobs"][0]["bytes"][0].GetInt(), want[j]);
  }
  // logprobs without top_logprobs: empty alternatives. Streamed: the chunks' entries join to the same list.
  auto bare = parse_json(http_request(s.port, "POST", "/v1/chat/completions",
                                      "{" + msgs + R"(,"temperature":0,"max_tokens":4,"logprobs":true})", auth())
                             .body);
  EXPECT_EQ(bare["choices"][0]["logprobs"]["content"][0]["top_logprobs"].Size(), 0u);
  auto st = http_request(s.port, "POST", "/v1/chat/completions", body + R"(,"stream":true})", auth());
  std::vector<double> streamed;
  for (const auto& e : sse_events(st.body)) {
    if (e == "[DONE]") break;
    auto c = parse_json(e);
    const auto& l = c["choices"][0]["logprobs"];
    if (!l.IsNull())
      for (auto& x : l["content"].GetArray()) streamed.push_back(x["logprob"].GetDouble());
  }
  ASSERT_EQ(streamed.size(), content.Size());
  for (size_t j = 0; j < streamed.size(); ++j) EXPECT_EQ(streamed[j], content[rapidjson::SizeType(j)]["logprob"].GetDouble());
}

TEST(HttpLogprobs, SeededChoicesEqualSingleRequestsWithDerivedSeeds) {
  auto& s = plain();
  const auto& p = fixture_prompt();
  const std::string sampled = R"(,"temperature":1.5,"top_p":1,"logprobs":1)";
  auto r = http_request(s.port, "POST", "/v1/completions", sampled_body(p, 10, sampled + R"(,"seed":41,"n":3)"), auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  ASSERT_EQ(d["choices"].Size(), 3u);
  std::vector<std::vector<int32_t>> got;
  int64_t completion_tokens = 0;
  for (rapidjson::SizeType i = 0; i < 3; ++i) {
    const auto& c = d["choices"][i];
    EXPECT_EQ(c["index"].GetInt(), int(i));
    got.push_back(int_array(c["tokens"]));
    completion_tokens += int64_t(got.back().size());
    // Choice i is the request with seed 41 + i.
    auto one = parse_json(http_request(s.port, "POST", "/v1/completions",
                                       sampled_body(p, 10, sampled + ",\"seed\":" + std::to_string(41 + i)), auth())
                              .body);
    EXPECT_EQ(got.back(), int_array(one["choices"][0]["tokens"])) << "choice " << i;
    // Sampled at temperature 1, the logprobs are still the model's raw distribution.
    expect_completion_logprobs(c["logprobs"], concat(p, got.back()), p.size(), 1);
  }
  EXPECT_TRUE(got[0] != got[1] || got[1] != got[2]) << "three seeds gave one text: " << ::testing::PrintToString(got);
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetInt(), int(p.size()));
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt64(), completion_tokens);

  // Streamed: each chunk names its choice; per index the tokens equal the non-streamed choice.
  auto st = http_request(s.port, "POST", "/v1/completions",
                         sampled_body(p, 10, sampled + R"(,"seed":41,"n":3,"stream":true,"stream_options":{"include_usage":true})"),
                         auth());
  ASSERT_EQ(st.status, 200) << st.body;
  std::map<int, std::vector<int32_t>> per;
  std::map<int, int> finishes;
  for (const auto& e : sse_events(st.body)) {
    if (e == "[DONE]") break;
    auto c = parse_json(e);
    if (c["choices"].Empty()) {
      EXPECT_EQ(c["usage"]["completion_tokens"].GetInt64(), completion_tokens);
      continue;
    }
    const auto& ch = c["choices"][0];
    int i = ch["index"].GetInt();
    if (ch.HasMember("tokens"))
      for (int32_t t : int_array(ch["tokens"])) per[i].push_back(t);
    if (!ch["finish_reason"].IsNull()) ++finishes[i];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(per[i], got[size_t(i)]) << "choice " << i;
    EXPECT_EQ(finishes[i], 1) << "choice " << i;
  }
}

TEST(HttpLogprobs, DraftingLeavesTheLogprobsUnchanged) {
  auto o = tiny_options(1);
  DraftOptions dr = fixed_costs();
  dr.drafters = {"lookup"};
  o.scheduler.draft = dr;
  static Srv drafted = start(o);
  auto& s = plain();
  // A prompt whose greedy continuation cycles, so the lookup drafter's proposals get accepted.
  std::vector<int32_t> p;
  for (int r = 0; r < 3; ++r) p.insert(p.end(), {159, 112, 116});
  const std::string extra = R"(,"ignore_eos":true,"logprobs":5)";
  auto a = parse_json(http_request(s.port, "POST", "/v1/completions", completion_body(p, 160, extra), auth()).body);
  auto b = parse_json(http_request(drafted.port, "POST", "/v1/completions", completion_body(p, 160, extra), auth()).body);
  ASSERT_GT(b["timings"]["accepted_tokens"].GetInt64(), 0) << "the drafted server never accepted a draft";
  const auto& la = a["choices"][0]["logprobs"];
  const auto& lb = b["choices"][0]["logprobs"];
  ASSERT_EQ(la["tokens"].Size(), lb["tokens"].Size());
  for (rapidjson::SizeType j = 0; j < la["tokens"].Size(); ++j) {
    EXPECT_STREQ(la["tokens"][j].GetString(), lb["tokens"][j].GetString()) << j;
    EXPECT_EQ(la["token_logprobs"][j].GetDouble(), lb["token_logprobs"][j].GetDouble()) << j;
    for (auto& m : la["top_logprobs"][j].GetObject()) {
      ASSERT_TRUE(lb["top_logprobs"][j].HasMember(m.name)) << j;
      EXPECT_EQ(m.value.GetDouble(), lb["top_logprobs"][j][m.name].GetDouble()) << j;
    }
  }
}

TEST(HttpLogprobs, BadValuesNameTheirField) {
  auto& s = plain();
  auto post = [&](const std::string& route, const std::string& body) { return http_request(s.port, "POST", route, body, auth()); };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  expect_error(post(cmpl, R"({"prompt":[1,2],"n":0})"), "invalid_value", "n");
  expect_error(post(cmpl, R"({"prompt":[1,2],"n":17})"), "invalid_value", "n");
  expect_error(post(cmpl, R"({"prompt":[1,2],"n":"2"})"), "invalid_type", "n");
  expect_error(post(cmpl, R"({"prompt":[1,2],"logprobs":21})"), "invalid_value", "logprobs");
  expect_error(post(cmpl, R"({"prompt":[1,2],"logprobs":-1})"), "invalid_value", "logprobs");
  expect_error(post(cmpl, R"({"prompt":[1,2],"logprobs":true})"), "invalid_type", "logprobs");
  expect_error(post(cmpl, R"({"prompt":[1,2],"echo":1})"), "invalid_type", "echo");
  expect_error(post(cmpl, R"({"prompt":[1,2],"max_tokens":0})"), "invalid_value", "max_tokens");
  expect_error(post(chat, "{" + msgs + R"(,"top_logprobs":2})"), "invalid_value", "top_logprobs");
  expect_error(post(chat, "{" + msgs + R"(,"logprobs":true,"top_logprobs":21})"), "invalid_value", "top_logprobs");
  expect_error(post(chat, "{" + msgs + R"(,"logprobs":1})"), "invalid_type", "logprobs");
  // More choices than the slots and the queue hold at once (2 + 64 here) can never be admitted.
  auto small = tiny_options(1);
  small.scheduler.max_queue = 2;
  auto t = start(small);
  expect_error(http_request(t.port, "POST", cmpl, R"({"prompt":[1,2],"n":4})", auth()), "invalid_value", "n");
  EXPECT_EQ(http_request(t.port, "POST", cmpl, R"({"prompt":[1,2],"n":3,"max_tokens":2})", auth()).status, 200);
}

}  // namespace
}  // namespace tandem::test
