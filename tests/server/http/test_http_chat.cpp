// /v1/chat/completions through the real Nemotron 3 Nano chat template (shared/data) and the byte
// codec: the rendered prompt, /tokenize's count, greedy ids equal tandem::generate on that prompt,
// thinking on and off, and streamed deltas that add up to the non-streamed message.
#include <gtest/gtest.h>

#include <filesystem>

#include "server_fixture.h"
#include "tandem/text/chat_output.h"
#include "test_util.h"
#include "tandem/text/text_stream.h"

namespace tandem::test {
namespace {

const std::string kUserHi = R"("messages":[{"role":"user","content":"hi"}])";

std::string chat_body(const std::string& extra) { return "{" + kUserHi + ",\"temperature\":0" + extra + "}"; }

TEST(HttpChat, NemotronTemplateThinkingOffAndOn) {
  std::string path = shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja");
  ASSERT_TRUE(std::filesystem::exists(path))
      << "missing " << path << ": the shared data folder (shared/data beside the checkout) holds the model's chat "
      << "template, the tokenizer_config.json chat_template of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 saved as .jinja";
  auto tmpl = std::make_shared<const ChatTemplate>(ChatTemplate::from_file(path));
  auto srv = start_server(tiny_options(1), std::make_shared<ByteCodec>(tmpl));
  uint16_t port = srv->port();
  wait_ready(port);

  const std::string off = R"(,"chat_template_kwargs":{"enable_thinking":false})";
  auto at = http_request(port, "POST", "/apply-template", "{" + kUserHi + off + "}", auth());
  ASSERT_EQ(at.status, 200) << at.body;
  std::string prompt = parse_json(at.body)["prompt"].GetString();
  EXPECT_NE(prompt.find("<|im_start|>user\nhi<|im_end|>"), std::string::npos) << prompt;
  const std::string tail = "<|im_start|>assistant\n<think></think>";
  EXPECT_EQ(prompt.rfind(tail), prompt.size() - tail.size()) << prompt;

  auto tk = parse_json(http_request(port, "POST", "/tokenize", "{" + kUserHi + off + "}", auth()).body);
  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  EXPECT_EQ(tk["count"].GetInt(), int(ids.size()));

  // Thinking off: everything is content; greedy ids are generate()'s on the rendered prompt.
  auto want = reference_tokens(ids, 30);
  std::string bytes;
  for (int32_t t : want)
    if (t != 2) bytes += char(t);
  auto r = http_request(port, "POST", "/v1/chat/completions", chat_body(off + R"(,"max_tokens":30)"), auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  EXPECT_STREQ(d["object"].GetString(), "chat.completion");
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetInt(), int(ids.size()));
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), int(want.size()));
  const auto& msg = d["choices"][0]["message"];
  EXPECT_STREQ(msg["role"].GetString(), "assistant");
  EXPECT_FALSE(msg.HasMember("reasoning_content"));
  std::string content = msg["content"].IsString() ? msg["content"].GetString() : "";
  // The reference parse of the same text (the parser owns whitespace rules around tags).
  EXPECT_EQ(content, ChatOutputParser::parse(utf8_lossy(bytes), {}).content);

  // Streamed: a role chunk first, content deltas that join to the same text, a finish chunk, usage.
  auto st = http_request(port, "POST", "/v1/chat/completions",
                         chat_body(off + R"(,"max_tokens":30,"stream":true,"stream_options":{"include_usage":true})"),
                         auth());
  auto ev = sse_events(st.body);
  ASSERT_GE(ev.size(), 4u) << st.body;
  EXPECT_STREQ(parse_json(ev[0])["choices"][0]["delta"]["role"].GetString(), "assistant");
  std::string joined, finish;
  for (size_t i = 1; i + 2 < ev.size(); ++i) {
    auto c = parse_json(ev[i]);
    const auto& delta = c["choices"][0]["delta"];
    if (delta.HasMember("content")) joined += delta["content"].GetString();
    if (c["choices"][0]["finish_reason"].IsString()) finish = c["choices"][0]["finish_reason"].GetString();
  }
  EXPECT_EQ(joined, content);
  EXPECT_EQ(finish, d["choices"][0]["finish_reason"].GetString());
  EXPECT_EQ(parse_json(ev[ev.size() - 2])["choices"].Size(), 0u);
  EXPECT_EQ(ev.back(), "[DONE]");

  // Thinking on (the template's default): decoding starts inside <think>, so the text is reasoning.
  auto rt = http_request(port, "POST", "/v1/chat/completions", chat_body(R"(,"max_tokens":12,"ignore_eos":true)"),
                         auth());
  ASSERT_EQ(rt.status, 200) << rt.body;
  auto dt = parse_json(rt.body);
  const auto& m2 = dt["choices"][0]["message"];
  ASSERT_TRUE(m2.HasMember("reasoning_content")) << rt.body;
  EXPECT_STREQ(dt["choices"][0]["finish_reason"].GetString(), "length");

  // A template that cannot render the request is the client's mistake, named.
  auto bad = http_request(port, "POST", "/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"sideways"})", auth());
  EXPECT_EQ(bad.status, 400) << bad.body;
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

}  // namespace
}  // namespace tandem::test
